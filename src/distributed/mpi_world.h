// The MPI process group DeltaServe runs in when started by mpirun: rank 0 serves, the others
// hold their shards and follow its step plan (distributed/rank_worker.h). Without mpirun nothing here
// is called, so a single process pays no MPI cost.
#pragma once
#include <cstddef>
#include <memory>

#include "model/shard.h"

namespace ds::distributed {

// Whether mpirun (OpenMPI's launcher, or any PMIx one) started this process, read from the
// environment before any MPI call.
bool started_by_mpirun();

// MPI_Init_thread(SERIALIZED) on construction (the engine's thread calls MPI, never two threads
// at once), MPI_Finalize on destruction. One per process.
class MpiWorld {
 public:
  MpiWorld();
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ends every rank at once with `code` (a rank that stopped answering; a fatal start-up error).
  [[noreturn]] static void abort(int code);

 private:
  int rank_ = 0, size_ = 1;
};

// Collectives over all ranks of MPI_COMM_WORLD: the allreduce and gather a sharded forward
// uses, and the byte broadcast, gather and scatter of the step protocol.
class MpiCollectives final : public Collectives {
 public:
  MpiCollectives();  // all ranks (MPI_COMM_WORLD)
  ~MpiCollectives() override;
  // The ranks with the same color, ordered by their rank here (a dcp group).
  std::shared_ptr<MpiCollectives> split(int color) const;
  int rank() const override;
  int size() const override;
  void allreduce_sum(float* data, size_t n) override;
  void gather(const float* send, size_t n, float* recv) override;
  void broadcast(void* data, size_t bytes);
  // A broadcast that waits politely: a worker idles here between steps, so it polls with short
  // sleeps after a brief spin instead of holding a core the HTTP threads could use. Every rank
  // must use this one for the same message (a nonblocking collective never matches a blocking
  // one): the step headers.
  void broadcast_idle(void* data, size_t bytes);
  void gather_bytes(const void* send, size_t bytes, void* recv);
  void scatter_bytes(const void* send, size_t bytes, void* recv);
  void allgather(const float* send, size_t n, float* recv) override;

 private:
  void* comm_ = nullptr;  // the MPI_Comm (a handle: mpi.h stays out of this header)
  bool owned_ = false;
};

}  // namespace ds::distributed
