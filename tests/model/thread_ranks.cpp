#include "thread_ranks.h"

#include <algorithm>

#include "core/error.h"

namespace ds::test {

ThreadRankedModel::ThreadRankedModel(const std::string& dir, int tp, int dcp) : tp_(tp), dcp_(dcp) {
  DS_CHECK(tp >= 1 && dcp >= 1 && (tp == 1 || tp % dcp == 0),
           "thread ranks: tp " + std::to_string(tp) + " with dcp " + std::to_string(dcp) + " is no rank layout");
  const int n = std::max(tp, dcp);
  std::vector<std::shared_ptr<ThreadCollectives>> world;
  if (tp > 1) world = ThreadCollectives::group(n);
  std::vector<std::shared_ptr<ThreadCollectives>> dcp_of(static_cast<size_t>(n));
  if (dcp > 1)
    for (int g = 0; g < n / dcp; ++g) {
      auto members = ThreadCollectives::group(dcp);
      for (int i = 0; i < dcp; ++i) dcp_of[size_t(g * dcp + i)] = members[size_t(i)];
    }
  handles_ = world;
  for (auto& h : dcp_of)
    if (h) handles_.push_back(h);
  // Loading calls no collective: the shards load here, one after another.
  for (int r = 0; r < n; ++r)
    ranks_.push_back(Model::load_shard(dir, 1, rank_shard(r, tp, dcp), tp > 1 ? world[size_t(r)] : nullptr,
                                       dcp_of[size_t(r)]));
  for (int r = 1; r < n; ++r) threads_.emplace_back([this, r] { worker(r); });
}

ThreadRankedModel::~ThreadRankedModel() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadRankedModel::failed(int rank, std::exception_ptr e) {
  std::string what = "unknown error";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = e;  // recorded before the abort, so the cause wins over its echoes
  }
  for (auto& h : handles_) h->abort("rank " + std::to_string(rank) + " failed: " + what);
}

void ThreadRankedModel::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      failed(rank, std::current_exception());
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (--running_ == 0) cv_.notify_all();
  }
}

void ThreadRankedModel::on_every_rank(const std::function<void(int)>& f) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &f;
    running_ = int(threads_.size());
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  try {
    f(0);
  } catch (...) {
    failed(0, std::current_exception());
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return running_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

size_t ThreadRankedModel::weights_bytes() const {
  size_t b = 0;
  for (const auto& m : ranks_) b += m->weights_bytes();
  return b;
}

size_t ThreadRankedModel::decode_weight_bytes() const {
  size_t b = 0;
  for (const auto& m : ranks_) b += m->decode_weight_bytes();
  return b;
}

uint64_t ThreadRankedModel::weights_fingerprint() const {
  // Cached entries hold every rank's part in this layout: never mixed with another layout's.
  return ranks_[0]->weights_fingerprint() ^ (0x9e3779b97f4a7c15ull * uint64_t(ranks_.size() * 1000 + size_t(tp_) * 31 + size_t(dcp_)));
}

void ThreadRankedModel::set_kv_dtype(KvDtype t) {
  for (auto& m : ranks_) m->set_kv_dtype(t);
}

void ThreadRankedModel::set_activation_dtype(ActivationDtype a) {
  for (auto& m : ranks_) m->set_activation_dtype(a);
}

void ThreadRankedModel::allocate(const RuntimeLimits& limits) {
  for (auto& m : ranks_) m->allocate(limits);
}

void ThreadRankedModel::forward(const ForwardBatch& batch, float* logits) {
  on_every_rank([&](int r) { ranks_[size_t(r)]->forward(batch, r == 0 ? logits : nullptr); });
}

void ThreadRankedModel::commit_speculative(int slot, int keep) {
  for (auto& m : ranks_) m->commit_speculative(slot, keep);
}

void ThreadRankedModel::save_state(int slot, void* dst) const {
  const size_t part = ranks_[0]->state_bytes_per_slot();
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->save_state(slot, static_cast<std::byte*>(dst) + r * part);
}

void ThreadRankedModel::load_state(int slot, const void* src) {
  const size_t part = ranks_[0]->state_bytes_per_slot();
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->load_state(slot, static_cast<const std::byte*>(src) + r * part);
}

void ThreadRankedModel::save_block(int block, void* dst) const {
  const size_t part = ranks_[0]->kv_bytes_per_block(limits().block_size);
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->save_block(block, static_cast<std::byte*>(dst) + r * part);
}

void ThreadRankedModel::load_block(int block, const void* src) {
  const size_t part = ranks_[0]->kv_bytes_per_block(limits().block_size);
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->load_block(block, static_cast<const std::byte*>(src) + r * part);
}

}  // namespace ds::test
