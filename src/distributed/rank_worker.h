// A rank other than 0: it holds its shard and runs whatever rank 0 broadcasts, until Exit.
#pragma once
#include <memory>

#include "distributed/mpi_world.h"
#include "distributed/rank_protocol.h"
#include "model/model.h"

namespace ds::distributed {

// Serves rank 0's operations until it sends Exit (returns 0). A model that fails to load is
// reported to rank 0, which ends the run with the message.
int run_rank_worker(MpiCollectives& comm);

// Binds this rank to its NUMA node and loads its shard of req.model_dir (tp = all ranks),
// filling the report's memory and error-free sizes. Rank 0 and the workers alike.
std::unique_ptr<Model> open_shard(MpiCollectives& comm, const OpenRequest& req, RankReport* report);
// allocate() and the report of what this rank now holds.
void allocate_shard(Model& m, const RuntimeLimits& limits, int rank, RankReport* report);

// Rank 0, at the end of the run: lets the workers leave their loop.
void release_workers(MpiCollectives& comm);

}  // namespace ds::distributed
