// What one rank of a tensor-parallel group holds and how its share of a layer meets the others'.
// The model stays ignorant of the transport: dist/ implements Collectives over MPI, and a model
// built without one (a single process) never calls it.
#pragma once
#include <cstddef>

namespace ds {

// This rank's slice of every split weight: heads, FFN columns, experts and vocabulary rows are
// cut into `size` equal parts and the rank keeps part `rank`. {0, 1}: the whole model.
struct TensorShard {
  int rank = 0;
  int size = 1;
  bool split() const { return size > 1; }
};

// The collectives a sharded forward needs, over the ranks of one tensor-parallel group. Every
// rank calls them in the same order with the same sizes (the step plan is the same everywhere).
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, n) becomes the elementwise sum over ranks, on every rank.
  virtual void allreduce_sum(float* data, size_t n) = 0;
  // Rank 0 receives every rank's n floats, rank after rank, in recv (size() * n floats); recv
  // is unused elsewhere.
  virtual void gather(const float* send, size_t n, float* recv) = 0;
};

}  // namespace ds
