// Collectives (model/shard.h) between threads of one process: N ranks of a model, each a thread
// holding its own shard, meet in shared memory instead of over MPI. Tests run tensor and decode
// context parallel at any rank count this way, in one process and under the sanitizers; the
// ranks' numerics are the same code whatever carries their collectives.
//
// Stricter than MPI where that costs nothing: every rank of a round must call the same
// collective with the same size (else every rank throws, naming both calls), a round that does
// not fill within the group's deadline throws instead of hanging, and abort() releases every
// rank waiting in the group (a rank whose work threw must not leave the others blocked).
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/shard.h"

namespace ds {

class ThreadCollectives final : public Collectives {
 public:
  // One handle per rank of a new group of `size` ranks, in rank order; hand handle r to the
  // thread that runs rank r (a handle is used by one thread at a time). A rank that waits longer
  // than `deadline` for the others in one collective throws ds::Error, as does every rank after.
  static std::vector<std::shared_ptr<ThreadCollectives>> group(int size,
                                                                std::chrono::milliseconds deadline = std::chrono::minutes(5));

  int rank() const override { return rank_; }
  int size() const override;
  // Sums in rank order (rank 0's value, plus rank 1's, ...) on every rank: every rank gets the
  // same bits.
  void allreduce_sum(float* data, size_t n) override;
  void gather(const float* send, size_t n, float* recv) override;
  void allgather(const float* send, size_t n, float* recv) override;
  // Ends the group: every rank waiting in it, and every later call on it, throws ds::Error
  // with `why`. Any thread may call it, any number of times (the first reason stays).
  void abort(const std::string& why);

  struct Shared;  // the group's meeting place (thread_collectives.cpp)
  ThreadCollectives(std::shared_ptr<Shared> shared, int rank);

 private:
  // Publishes this rank's buffer for the round and returns once every rank has.
  void meet(int op, size_t n, const float* send);

  std::shared_ptr<Shared> shared_;
  int rank_;
  std::vector<float> sum_;  // this rank's allreduce result, before it overwrites its data
};

}  // namespace ds
