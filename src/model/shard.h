// What one rank of a tensor-parallel group holds and how its share of a layer meets the others'.
// The model stays ignorant of the transport: distributed/ implements Collectives over MPI,
// model/thread_collectives.h between threads of one process, and a model built without one (a
// single process) never calls it.
#pragma once
#include <cstddef>

namespace ds {

// This rank's slice of every split weight: heads, FFN columns, experts and vocabulary rows are
// cut into `size` (tp) equal parts and the rank keeps part `rank`. {0, 1}: the whole model.
// Decode context parallel: the attention KV cache is cut by tokens among `dcp` ranks (token i
// on dcp rank i mod dcp), which reuse the tensor-parallel ranks: dcp divides tp (consecutive
// ranks form a dcp group), or tp is 1 (every rank holds the whole model, and only the KV is
// split). Ranks: max(tp, dcp).
struct TensorShard {
  int rank = 0;
  int size = 1;
  int dcp_rank = 0;
  int dcp = 1;
  bool split() const { return size > 1; }
};

// Rank `rank`'s shard in a run of max(tp, dcp) ranks (docs/ranks.md): tensor parallel over all
// ranks (tp 1: every rank holds the whole model), dcp groups of consecutive ranks (this rank's
// group is rank / dcp). One layout for MPI ranks and ranks that are threads.
inline TensorShard rank_shard(int rank, int tp, int dcp) { return TensorShard{tp > 1 ? rank : 0, tp, rank % dcp, dcp}; }

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
  // Every rank receives every rank's n floats, rank after rank, in recv (size() * n floats).
  virtual void allgather(const float* send, size_t n, float* recv) = 0;
};

// A mixer's share of decode context parallel attention (model/dcp_attention.h): this rank's
// place in its dcp group, and the group's collectives. size 1: the whole KV, no exchange.
struct AttentionShard {
  int rank = 0;
  int size = 1;
  // The group's ranks hold different query heads (tp > 1), which the group gathers so each
  // rank attends all of them over its tokens; with tp 1 they all hold every head already.
  bool heads_split = false;
  Collectives* group = nullptr;
  bool active() const { return size > 1; }
  bool owns(int pos) const { return pos % size == rank; }
  int local(int pos) const { return pos / size; }
  // Tokens of the context [0, n) this rank holds.
  int local_count(int n) const { return n > rank ? (n - rank + size - 1) / size : 0; }
};

}  // namespace ds
