#include "distributed/ranks.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "core/error.h"
#include "distributed/rank_worker.h"
#include "distributed/ranked_model.h"
#include "model/config.h"
#include "model/tensor_split.h"

namespace ds::distributed {

void check_rank_layout(const RankOptions& o, int world_size, bool under_mpirun) {
  auto fail = [](const std::string& m) { throw Error("invalid settings: " + m); };
  if (o.tp < 1) fail("--tp must be >= 1, got " + std::to_string(o.tp));
  if (o.dcp < 1) fail("--dcp must be >= 1, got " + std::to_string(o.dcp));
  if (o.tp > 1 && o.tp % o.dcp != 0)
    fail("--dcp " + std::to_string(o.dcp) + " does not divide --tp " + std::to_string(o.tp) +
         ": decode context parallel reuses the tensor-parallel ranks (or runs alone, with --tp 1)");
  const int ranks = std::max(o.tp, o.dcp);
  const std::string layout = "--tp " + std::to_string(o.tp) + " --dcp " + std::to_string(o.dcp);
  if (!under_mpirun && ranks > 1)
    fail(layout + " runs one process per rank: start it with mpirun -np " + std::to_string(ranks));
  if (under_mpirun && world_size != ranks)
    fail("mpirun started " + std::to_string(world_size) + " processes but " + layout + " takes " + std::to_string(ranks) +
         ": run mpirun -np " + std::to_string(ranks));
  if (!(o.total_cpu_dram_gb >= 0) || !std::isfinite(o.total_cpu_dram_gb))
    fail("--total-cpu-dram-gb must be a positive number (0: not set)");
  if (!(o.step_timeout_s > 0)) fail("--rank-step-timeout-s must be > 0");
}

Ranks::Ranks() {
  if (!started_by_mpirun()) return;
  world_ = std::make_unique<MpiWorld>();
  comm_ = std::make_shared<MpiCollectives>();
}

Ranks::~Ranks() {
  if (!world_ || world_->rank() != 0) return;
  try {
    release_workers(*comm_);
  } catch (const std::exception& e) {
    spdlog::error("ranks: releasing the workers: {}", e.what());
  }
}

int Ranks::serve_as_worker() {
  DS_CHECK(world_ && world_->rank() != 0, "serve_as_worker: this is rank 0");
  return run_rank_worker(*comm_);
}

std::unique_ptr<Model> Ranks::open_model(const std::string& dir, int threads, const RankOptions& o) {
  check_rank_layout(o, size(), distributed());
  if (o.tp > 1) check_tensor_split(load_model_config(dir), o.tp, o.dcp);
  // Rank 0 binds here, before the model's threads start (they inherit it; open_shard binds it
  // again, to the same node, as it binds every worker).
  placement_ = bind_rank_to_numa(o.numa, rank(), size());
  if (o.total_cpu_dram_gb > 0) {
    const int ranks_on_node = placement_.pinned ? std::max(1, size() / placement_.nodes) : size();
    check_rank_budget(o.total_cpu_dram_gb / size(), placement_, ranks_on_node);
  }
  if (!distributed()) {
    spdlog::info("ranks: one process (tp 1, dcp 1); NUMA {}", placement_.note);
    return Model::load(dir, threads);
  }
  OpenRequest req{dir, o.tp, o.dcp, threads, o.numa};
  auto m = std::make_unique<RankedModel>(comm_, req, o.step_timeout_s);
  spdlog::info("ranks: {} MPI ranks, tp {}, dcp {}; NUMA {}; each rank holds {:.1f} MB of weights", size(), o.tp, o.dcp,
               placement_.note, double(m->rank_memory().front().weights_bytes) / 1e6);
  return m;
}

}  // namespace ds::distributed
