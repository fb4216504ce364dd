// The model as rank 0's engine sees it under mpirun: a Model whose every operation is first
// broadcast to the other ranks (distributed/rank_protocol.h), then run on rank 0's own shard, so all
// ranks run it together. Cache memory (a slot's state, a KV block) is every rank's part, rank
// after rank: snapshots and the disk tier hold whole states and blocks, written by rank 0.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/mpi_world.h"
#include "distributed/rank_protocol.h"
#include "model/model.h"

namespace ds::distributed {

class RankedModel final : public Model {
 public:
  // Every rank loads its shard of req.model_dir (tp = the world's size); throws ds::Error with
  // the first rank's error. A step that does not finish within step_timeout_s (a rank died or
  // hangs) ends every rank: a stuck collective must not hang the server.
  RankedModel(std::shared_ptr<MpiCollectives> comm, const OpenRequest& req, double step_timeout_s);
  ~RankedModel() override;  // the workers drop their shards and wait for the next Open

  std::shared_ptr<ThreadPool> thread_pool() const override { return local_->thread_pool(); }
  const ModelConfig& config() const override { return local_->config(); }
  size_t weights_bytes() const override;
  uint64_t weights_fingerprint() const override;
  size_t decode_weight_bytes() const override;
  void set_kv_dtype(KvDtype t) override;
  KvDtype kv_dtype() const override { return local_->kv_dtype(); }
  void set_activation_dtype(ActivationDtype a) override;
  ActivationDtype activation_dtype() const override { return local_->activation_dtype(); }
  void allocate(const RuntimeLimits& limits) override;
  const RuntimeLimits& limits() const override { return local_->limits(); }
  void forward(const ForwardBatch& batch, float* logits) override;
  void commit_speculative(int slot, int keep) override;
  void set_hidden_taps(const std::vector<int>& layers, int tail_rows) override;
  const float* hidden_taps() const override { return local_->hidden_taps(); }
  void embed(std::span<const int32_t> ids, float* out) const override { local_->embed(ids, out); }
  size_t rollback_bytes_per_slot() const override { return local_->rollback_bytes_per_slot() * ranks(); }
  const ForwardProfile& last_profile() const override { return local_->last_profile(); }
  std::vector<RankMemory> rank_memory() const override;

  size_t kv_bytes_per_block(int block_size) const override { return local_->kv_bytes_per_block(block_size) * ranks(); }
  size_t state_bytes_per_slot() const override { return local_->state_bytes_per_slot() * ranks(); }
  void save_state(int slot, void* dst) const override;
  void load_state(int slot, const void* src) override;
  void save_block(int block, void* dst) const override;
  void load_block(int block, const void* src) override;

 private:
  size_t ranks() const { return size_t(comm_->size()); }
  // Broadcasts one operation (and its payload) to the other ranks.
  void send(RankOp op, int a = 0, int b = 0, const std::vector<char>& payload = {}) const;
  std::vector<RankReport> gather_reports(const RankReport& mine) const;
  // Runs f with the step watchdog armed.
  template <typename F>
  void timed(const char* what, F&& f) const;
  void watch();

  std::shared_ptr<MpiCollectives> comm_;
  std::unique_ptr<Model> local_;
  std::vector<RankReport> reports_;
  int tp_ = 1, dcp_ = 1;
  mutable std::vector<char> part_;  // one rank's share of a state or block
  double step_timeout_s_;
  mutable std::atomic<int64_t> busy_since_ns_{0};  // 0: no operation in flight
  mutable std::atomic<const char*> busy_what_{""};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace ds::distributed
