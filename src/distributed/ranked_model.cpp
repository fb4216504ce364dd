#include "distributed/ranked_model.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "distributed/rank_worker.h"

namespace ds::distributed {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RankedModel::RankedModel(std::shared_ptr<MpiCollectives> comm, const OpenRequest& req, double step_timeout_s)
    : comm_(std::move(comm)), tp_(req.tp), dcp_(req.dcp), step_timeout_s_(step_timeout_s) {
  DS_CHECK(step_timeout_s > 0, "invalid settings: --rank-step-timeout-s must be > 0");
  const std::vector<char> payload = encode_open(req);
  send(RankOp::Open, 0, 0, payload);
  RankReport mine;
  try {
    local_ = open_shard(*comm_, req, &mine);
  } catch (const std::exception& e) {
    std::snprintf(mine.error, sizeof mine.error, "%s", e.what());
  }
  reports_ = gather_reports(mine);
  for (const RankReport& r : reports_)
    if (r.error[0] != '\0') {
      // Every rank saw the same files: rank 0's message is the one to show when it has one.
      if (local_) send(RankOp::Close);
      throw Error(r.error);
    }
  watchdog_ = std::thread([this] { watch(); });
}

RankedModel::~RankedModel() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  try {
    send(RankOp::Close);
  } catch (const std::exception& e) {
    spdlog::error("ranks: closing the model: {}", e.what());
  }
}

void RankedModel::send(RankOp op, int a, int b, const std::vector<char>& payload) const {
  OpHeader h;
  h.op = uint32_t(op);
  h.a = a;
  h.b = b;
  h.payload_bytes = payload.size();
  comm_->broadcast_idle(&h, sizeof h);
  if (!payload.empty()) comm_->broadcast(const_cast<char*>(payload.data()), payload.size());
}

std::vector<RankReport> RankedModel::gather_reports(const RankReport& mine) const {
  std::vector<RankReport> all(ranks());
  comm_->gather_bytes(&mine, sizeof mine, all.data());
  return all;
}

template <typename F>
void RankedModel::timed(const char* what, F&& f) const {
  busy_what_.store(what, std::memory_order_relaxed);
  busy_since_ns_.store(now_ns(), std::memory_order_release);
  struct Disarm {
    std::atomic<int64_t>& a;
    ~Disarm() { a.store(0, std::memory_order_release); }
  } disarm{busy_since_ns_};
  f();
}

void RankedModel::watch() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::milliseconds(100), [this] { return stopping_; })) {
    const int64_t since = busy_since_ns_.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double waited = double(now_ns() - since) / 1e9;
    if (waited < step_timeout_s_) continue;
    spdlog::critical("ranks: a {} has not finished after {:.1f} s (--rank-step-timeout-s {}): a rank died or stopped "
                     "answering; stopping every rank",
                     busy_what_.load(std::memory_order_relaxed), waited, step_timeout_s_);
    spdlog::default_logger()->flush();
    MpiWorld::abort(70);
  }
}

size_t RankedModel::weights_bytes() const {
  size_t b = 0;
  for (const RankReport& r : reports_) b += r.memory.weights_bytes;
  return b;
}

size_t RankedModel::decode_weight_bytes() const {
  size_t b = 0;
  for (const RankReport& r : reports_) b += r.decode_weight_bytes;
  return b;
}

uint64_t RankedModel::weights_fingerprint() const {
  // A block or state saved by ranks holds every rank's part in their layout: never mix it with
  // another layout's entries (or a single process's) in the prefix cache or the disk tier.
  return local_->weights_fingerprint() ^ (0x9e3779b97f4a7c15ull * uint64_t(ranks() * 1000 + size_t(tp_) * 31 + size_t(dcp_)));
}

void RankedModel::set_kv_dtype(KvDtype t) {
  send(RankOp::SetKvDtype, int(t));
  local_->set_kv_dtype(t);
}

void RankedModel::set_activation_dtype(ActivationDtype a) {
  send(RankOp::SetActivationDtype, int(a));
  local_->set_activation_dtype(a);
}

void RankedModel::allocate(const RuntimeLimits& limits) {
  std::vector<char> payload(sizeof limits);
  std::memcpy(payload.data(), &limits, sizeof limits);
  send(RankOp::Allocate, 0, 0, payload);
  RankReport mine;
  mine.memory.numa_node = reports_.front().memory.numa_node;  // where Open bound rank 0
  try {
    allocate_shard(*local_, limits, comm_->rank(), &mine);
  } catch (const std::exception& e) {
    std::snprintf(mine.error, sizeof mine.error, "%s", e.what());
  }
  std::vector<RankReport> all = gather_reports(mine);
  for (size_t r = 0; r < all.size(); ++r) {
    DS_CHECK(all[r].error[0] == '\0', "rank " + std::to_string(r) + ": " + all[r].error);
    reports_[r].memory = all[r].memory;
  }
}

void RankedModel::forward(const ForwardBatch& batch, float* logits) {
  timed("forward step", [&] {
    send(RankOp::Forward, 0, 0, encode_batch(batch, local_->limits().block_size));
    local_->forward(batch, logits);
  });
}

void RankedModel::commit_speculative(int slot, int keep) {
  timed("speculative commit", [&] {
    send(RankOp::Commit, slot, keep);
    local_->commit_speculative(slot, keep);
  });
}

void RankedModel::set_hidden_taps(const std::vector<int>& layers, int tail_rows) {
  // Only rank 0's drafter reads them; the workers need none.
  local_->set_hidden_taps(layers, tail_rows);
}

std::vector<RankMemory> RankedModel::rank_memory() const {
  std::vector<RankMemory> m;
  for (const RankReport& r : reports_) m.push_back(r.memory);
  return m;
}

void RankedModel::save_state(int slot, void* dst) const {
  timed("state save", [&] {
    send(RankOp::SaveState, slot);
    part_.resize(local_->state_bytes_per_slot());
    local_->save_state(slot, part_.data());
    comm_->gather_bytes(part_.data(), part_.size(), dst);
  });
}

void RankedModel::load_state(int slot, const void* src) {
  timed("state load", [&] {
    send(RankOp::LoadState, slot);
    part_.resize(local_->state_bytes_per_slot());
    comm_->scatter_bytes(src, part_.size(), part_.data());
    local_->load_state(slot, part_.data());
  });
}

void RankedModel::save_block(int block, void* dst) const {
  timed("KV block save", [&] {
    send(RankOp::SaveBlock, block);
    part_.resize(local_->kv_bytes_per_block(local_->limits().block_size));
    local_->save_block(block, part_.data());
    comm_->gather_bytes(part_.data(), part_.size(), dst);
  });
}

void RankedModel::load_block(int block, const void* src) {
  timed("KV block load", [&] {
    send(RankOp::LoadBlock, block);
    part_.resize(local_->kv_bytes_per_block(local_->limits().block_size));
    comm_->scatter_bytes(src, part_.size(), part_.data());
    local_->load_block(block, part_.data());
  });
}

}  // namespace ds::distributed
