#include "distributed/rank_worker.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "distributed/numa_binding.h"

namespace ds::distributed {

std::unique_ptr<Model> open_shard(MpiCollectives& comm, const OpenRequest& req, RankReport* report) {
  const NumaPlacement p = bind_rank_to_numa(req.numa, comm.rank(), comm.size());
  // mpirun binds each rank to one core by default (OpenMPI, 2 ranks or fewer); threads beyond
  // the CPUs a rank may use would take turns on them.
  const int cpus = default_thread_count();
  if (req.threads > cpus)
    spdlog::warn("rank {}: --threads {} but this rank may run on {} CPU(s) only (mpirun's binding): start mpirun with "
                 "--bind-to none, or let --numa-bind pin it to a node",
                 comm.rank(), req.threads, cpus);
  report->memory.rank = comm.rank();
  report->memory.numa_node = p.node;
  const int rank = comm.rank();
  DS_CHECK(comm.size() == std::max(req.tp, req.dcp), "rank protocol: " + std::to_string(comm.size()) + " ranks for tp " +
                                                         std::to_string(req.tp) + ", dcp " + std::to_string(req.dcp));
  // Tensor parallel over all ranks (tp 1: each holds the whole model); dcp groups of
  // consecutive ranks.
  const TensorShard shard = rank_shard(rank, req.tp, req.dcp);
  std::shared_ptr<Collectives> tp_comm, dcp_comm;
  if (req.tp > 1) tp_comm = std::shared_ptr<Collectives>(&comm, [](Collectives*) {});  // the world outlives every model
  if (req.dcp > 1) dcp_comm = comm.split(rank / req.dcp);
  std::unique_ptr<Model> m = Model::load_shard(req.model_dir, req.threads, shard, tp_comm, dcp_comm);
  report->memory.weights_bytes = m->weights_bytes();
  report->decode_weight_bytes = m->decode_weight_bytes();
  return m;
}

void allocate_shard(Model& m, const RuntimeLimits& limits, int rank, RankReport* report) {
  m.allocate(limits);
  report->memory.rank = rank;
  report->memory.weights_bytes = m.weights_bytes();
  report->memory.kv_pool_bytes = m.kv_bytes_per_block(limits.block_size) * uint64_t(limits.num_kv_blocks);
  report->memory.state_bytes = (m.state_bytes_per_slot() + m.rollback_bytes_per_slot()) * uint64_t(limits.max_seqs);
}

void release_workers(MpiCollectives& comm) {
  OpHeader h;
  h.op = uint32_t(RankOp::Exit);
  comm.broadcast_idle(&h, sizeof h);
}

int run_rank_worker(MpiCollectives& comm) {
  std::unique_ptr<Model> model;
  int numa_node = -1;
  std::vector<char> payload, part, logits;
  DecodedBatch step;
  for (;;) {
    OpHeader h;
    comm.broadcast_idle(&h, sizeof h);
    payload.resize(h.payload_bytes);
    if (h.payload_bytes > 0) comm.broadcast(payload.data(), payload.size());
    const auto op = RankOp(h.op);
    if (op == RankOp::Exit) return 0;
    if (op == RankOp::Open || op == RankOp::Allocate) {
      RankReport report;
      try {
        if (op == RankOp::Open) {
          model.reset();
          model = open_shard(comm, decode_open(payload), &report);
          numa_node = report.memory.numa_node;
        } else {
          DS_CHECK(model != nullptr, "rank protocol: Allocate before Open");
          RuntimeLimits limits;
          DS_CHECK(payload.size() == sizeof limits, "rank protocol: a malformed Allocate");
          std::memcpy(&limits, payload.data(), sizeof limits);
          allocate_shard(*model, limits, comm.rank(), &report);
          report.memory.numa_node = numa_node;
        }
      } catch (const std::exception& e) {
        std::snprintf(report.error, sizeof report.error, "rank %d: %s", comm.rank(), e.what());
      }
      comm.gather_bytes(&report, sizeof report, nullptr);
      continue;
    }
    if (op == RankOp::Close) {
      model.reset();
      continue;
    }
    if (!model) {
      spdlog::critical("rank {}: operation {} without a model", comm.rank(), h.op);
      MpiWorld::abort(71);
    }
    // Rank 0 runs the same checks on the same plan before any collective, so an operation that
    // throws here threw there too: both move on to the next one.
    try {
      switch (op) {
        case RankOp::SetKvDtype: model->set_kv_dtype(KvDtype(h.a)); break;
        case RankOp::SetActivationDtype: model->set_activation_dtype(ActivationDtype(h.a)); break;
        case RankOp::Forward:
          decode_batch(payload, &step);
          model->forward(step.batch, nullptr);
          break;
        case RankOp::Commit: model->commit_speculative(h.a, h.b); break;
        case RankOp::SaveState:
          part.resize(model->state_bytes_per_slot());
          model->save_state(h.a, part.data());
          comm.gather_bytes(part.data(), part.size(), nullptr);
          break;
        case RankOp::LoadState:
          part.resize(model->state_bytes_per_slot());
          comm.scatter_bytes(nullptr, part.size(), part.data());
          model->load_state(h.a, part.data());
          break;
        case RankOp::SaveBlock:
          part.resize(model->kv_bytes_per_block(model->limits().block_size));
          model->save_block(h.a, part.data());
          comm.gather_bytes(part.data(), part.size(), nullptr);
          break;
        case RankOp::LoadBlock:
          part.resize(model->kv_bytes_per_block(model->limits().block_size));
          comm.scatter_bytes(nullptr, part.size(), part.data());
          model->load_block(h.a, part.data());
          break;
        default:
          spdlog::critical("rank {}: unknown operation {} from rank 0", comm.rank(), h.op);
          MpiWorld::abort(71);
      }
    } catch (const std::exception& e) {
      // Rank 0 checks a plan before it broadcasts it, so this is rare: the same throw on every
      // rank (each moves on), or a failure of this rank alone, which leaves the ranks out of
      // step until rank 0's step watchdog ends the job. Either way the cause belongs in the log.
      spdlog::warn("rank {}: operation {} failed: {}", comm.rank(), h.op, e.what());
    }
  }
}

}  // namespace ds::distributed
