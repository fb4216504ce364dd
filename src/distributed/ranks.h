// How `serve` runs as several ranks: the options, their start-up checks, and the process group
// (MPI, when mpirun started us). Ranks = max(tp, dcp): every rank holds 1/tp of the weights,
// and 1/dcp of the attention KV cache by tokens; dcp divides tp (the dcp groups are consecutive
// tp ranks), or tp is 1 (the whole model on every rank, the KV split).
#pragma once
#include <memory>
#include <string>

#include "distributed/mpi_world.h"
#include "distributed/numa_binding.h"
#include "model/model.h"

namespace ds::distributed {

struct RankOptions {
  int tp = 1;
  int dcp = 1;
  std::string numa = "auto";     // --numa-bind
  double total_cpu_dram_gb = 0;  // --total-cpu-dram-gb (0: not set)
  double step_timeout_s = 120;   // --rank-step-timeout-s
};

// The rank layout against the process count: one line naming what does not fit.
void check_rank_layout(const RankOptions& o, int world_size, bool under_mpirun);

// This process's place in the run. Under mpirun: MPI is initialised here; rank 0 serves and
// the others run serve_as_worker(). Without: one process, no MPI call ever.
class Ranks {
 public:
  Ranks();
  ~Ranks();  // rank 0 releases the workers, then MPI is finalised
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;
  bool distributed() const { return world_ != nullptr; }
  int rank() const { return world_ ? world_->rank() : 0; }
  int size() const { return world_ ? world_->size() : 1; }
  // A rank other than 0: runs rank 0's operations until it is released; the exit code.
  int serve_as_worker();
  // Rank 0 (or the one process): binds to NUMA, checks the per-rank budget, and loads the
  // model: a RankedModel across all ranks, or the whole model in one process.
  std::unique_ptr<Model> open_model(const std::string& dir, int threads, const RankOptions& o);
  const NumaPlacement& placement() const { return placement_; }
  // The process group's collectives (null in one process): tests build RankedModels on it.
  std::shared_ptr<MpiCollectives> collectives() const { return comm_; }

 private:
  std::unique_ptr<MpiWorld> world_;
  std::shared_ptr<MpiCollectives> comm_;
  NumaPlacement placement_;
};

}  // namespace ds::distributed
