// Ranks as threads of one process, for tests: max(tp, dcp) shards of one model folder
// (Model::load_shard, the layout MPI ranks get: rank_shard in model/shard.h), rank r's forward
// on thread r, joined by ThreadCollectives (the world for tensor parallel, groups of dcp
// consecutive ranks for decode context parallel). As a Model it is what rank 0's engine sees
// under mpirun (distributed::RankedModel): every forward runs on all ranks at once and rank 0 writes
// the logits; a state or a block is every rank's part, rank after rank. So 3, 4 or 8 ranks run
// under plain ctest and the sanitizers, where MPI would need mpirun and that many processes.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "model/thread_collectives.h"

namespace ds::test {

class ThreadRankedModel final : public Model {
 public:
  // Loads every rank's shard (one model thread each). Throws ds::Error as load_shard does.
  ThreadRankedModel(const std::string& dir, int tp, int dcp);
  ~ThreadRankedModel() override;

  int ranks() const { return int(ranks_.size()); }
  Model& rank_model(int r) { return *ranks_[size_t(r)]; }

  std::shared_ptr<ThreadPool> thread_pool() const override { return ranks_[0]->thread_pool(); }
  const ModelConfig& config() const override { return ranks_[0]->config(); }
  size_t weights_bytes() const override;
  uint64_t weights_fingerprint() const override;
  size_t decode_weight_bytes() const override;
  void set_kv_dtype(KvDtype t) override;
  KvDtype kv_dtype() const override { return ranks_[0]->kv_dtype(); }
  void set_activation_dtype(ActivationDtype a) override;
  ActivationDtype activation_dtype() const override { return ranks_[0]->activation_dtype(); }
  void allocate(const RuntimeLimits& limits) override;
  const RuntimeLimits& limits() const override { return ranks_[0]->limits(); }
  // Every rank at once (rank 0 on the calling thread); the first rank's error is rethrown,
  // after the collectives released the others (the ranks cannot step again after one).
  void forward(const ForwardBatch& batch, float* logits) override;
  void commit_speculative(int slot, int keep) override;
  void set_hidden_taps(const std::vector<int>& layers, int tail_rows) override { ranks_[0]->set_hidden_taps(layers, tail_rows); }
  const float* hidden_taps() const override { return ranks_[0]->hidden_taps(); }
  void embed(std::span<const int32_t> ids, float* out) const override { ranks_[0]->embed(ids, out); }
  size_t rollback_bytes_per_slot() const override { return ranks_[0]->rollback_bytes_per_slot() * ranks_.size(); }

  size_t kv_bytes_per_block(int block_size) const override { return ranks_[0]->kv_bytes_per_block(block_size) * ranks_.size(); }
  size_t state_bytes_per_slot() const override { return ranks_[0]->state_bytes_per_slot() * ranks_.size(); }
  void save_state(int slot, void* dst) const override;
  void load_state(int slot, const void* src) override;
  void save_block(int block, void* dst) const override;
  void load_block(int block, const void* src) override;

 private:
  // Runs f(rank) on every rank's thread (rank 0 here) and waits for all of them.
  void on_every_rank(const std::function<void(int)>& f);
  void worker(int rank);
  void failed(int rank, std::exception_ptr e);

  int tp_, dcp_;
  std::vector<std::unique_ptr<Model>> ranks_;
  std::vector<std::shared_ptr<ThreadCollectives>> handles_;  // every group's handles, to abort them all

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;  // worker ranks still in the current job
  bool stopping_ = false;
  std::exception_ptr error_;  // the first rank's failure in the current job
  std::vector<std::thread> threads_;  // ranks 1..N-1
};

}  // namespace ds::test
