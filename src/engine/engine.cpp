#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "cache/block_hash.h"

namespace ds {

Engine::Engine(std::unique_ptr<Model> model, EngineConfig cfg)
    : model_(std::move(model)), cfg_(cfg) {
  DS_CHECK(model_ != nullptr, "engine: no model");
  resolve_engine_config(&cfg_, *model_);
  vocab_ = model_->config().vocab_size;
  model_->allocate(runtime_limits(cfg_));
  pool_ = std::make_unique<BlockPool>(cfg_.num_kv_blocks, cfg_.block_size);
  PrefixCacheSettings prefix;
  if (cfg_.enable_prefix_caching) {
    snapshots_ = std::make_unique<StateSnapshots>(cfg_.num_state_snapshots, model_->state_bytes_per_slot());
    const ModelConfig& mc = model_->config();
    // What a block's contents depend on besides its tokens: this model and this block size.
    const uint64_t identity[] = {std::hash<std::string>{}(mc.model_type), uint64_t(mc.vocab_size),
                                 uint64_t(mc.hidden_size), uint64_t(mc.num_layers),
                                 uint64_t(model_->weights_bytes()), uint64_t(cfg_.block_size)};
    prefix.enabled = true;
    prefix.snapshot_interval = cfg_.state_snapshot_interval;
    prefix.decode_snapshots = cfg_.decode_snapshots;
    prefix.seed = block_hash_seed(identity);
  }
  PrefixTierHooks tier = cfg_.disk_tier_dir.empty() ? PrefixTierHooks{} : open_disk_tier();
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerLimits{cfg_.max_num_seqs, cfg_.max_num_batched_tokens, cfg_.max_model_len}, *pool_,
      snapshots_.get(), prefix, std::move(tier));
  sampler_ = Sampler(vocab_);
  // Everything the step loop touches is sized here, for the largest step the settings allow.
  logits_.resize(size_t(cfg_.max_num_seqs) * size_t(vocab_));
  sampled_.resize(size_t(cfg_.max_num_seqs));
  sampled_logprob_.resize(size_t(cfg_.max_num_seqs));
  scratch_.reserve(size_t(cfg_.max_num_seqs) + size_t(cfg_.max_waiting));
  top_.reserve(64);
  alive_ = true;  // set before the thread starts so /health is right as soon as we return
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

std::shared_ptr<RequestStream> Engine::submit(Request req) {
  if (closed_.load()) throw EngineStopped("the server is shutting down and accepts no new requests");
  const int n = int(req.prompt.size());
  DS_CHECK(n > 0, "the prompt is empty");
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    const int32_t t = req.prompt[i];
    DS_CHECK(t >= 0 && t < vocab_, "prompt token " + std::to_string(t) + " at position " +
                                       std::to_string(i) + " is outside the vocabulary [0, " +
                                       std::to_string(vocab_) + ")");
  }
  DS_CHECK(n < cfg_.max_model_len,
           "the prompt has " + std::to_string(n) + " tokens but max_model_len is " +
               std::to_string(cfg_.max_model_len) + " (room is needed for at least one new token)");
  DS_CHECK(req.max_tokens >= 1, "max_tokens must be at least 1, got " + std::to_string(req.max_tokens));

  auto seq = std::make_unique<Sequence>();
  seq->tokens = req.prompt;
  seq->num_prompt = n;
  seq->rng.reseed(req.sampling.seed);
  seq->arrival = Clock::now();
  seq->req = std::move(req);
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load())
      throw EngineStopped("the server is shutting down and accepts no new requests");
    if (int(incoming_.size()) + waiting_.load() >= cfg_.max_waiting)
      throw EngineBusy("the server is at capacity: " + std::to_string(cfg_.max_waiting) +
                       " requests are already waiting; retry later");
    stream = std::make_shared<RequestStream>(next_id_++, n);
    seq->stream = stream;
    incoming_.push_back(std::move(seq));
    in_flight_.fetch_add(1);
  }
  cv_.notify_one();
  return stream;
}

void Engine::cancel_all() {
  cancel_all_.store(true);
  cv_.notify_one();
}

void Engine::close() { closed_.store(true); }

void Engine::stop() {
  closed_.store(true);
  stop_.store(true);
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineSnapshot Engine::snapshot() const {
  EngineSnapshot s;
  s.running = snap_running_.load();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting = waiting_.load() + int(incoming_.size());
  }
  s.kv_blocks_used = snap_kv_used_.load();
  s.kv_blocks_total = cfg_.num_kv_blocks;
  s.cached_blocks = snap_cached_.load();
  s.state_snapshots = snap_snapshots_.load();
  s.steps = steps_.load();
  s.preemptions = uint64_t(metrics_.preemptions->Value());
  return s;
}

void Engine::loop() {
  std::vector<std::unique_ptr<Sequence>> arrived;
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool idle = scheduler_->num_running() == 0 && scheduler_->num_waiting() == 0;
      if (idle && incoming_.empty() && !cancel_all_.load())
        cv_.wait_for(lock, std::chrono::milliseconds(50),
                     [&] { return !incoming_.empty() || stop_.load() || cancel_all_.load(); });
      arrived.swap(incoming_);
      // Leaving incoming_ under the lock and counted here, so submit() never misses them.
      waiting_.store(scheduler_->num_waiting() + int(arrived.size()));
    }
    if (stop_.load()) {
      for (auto& s : arrived) scheduler_->add(std::move(s));
      arrived.clear();
      break;
    }
    for (auto& s : arrived) scheduler_->add(std::move(s));
    arrived.clear();
    try {
      step();
    } catch (const std::exception& e) {
      // forward() is not meant to throw; if it does, the sequences in flight cannot be trusted,
      // but the engine can: fail them with the reason and keep serving.
      spdlog::error("engine step failed: {}", e.what());
      fail_all(std::string("engine error: ") + e.what());
    }
  }
  scratch_.clear();
  scheduler_->take_all(&scratch_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : incoming_) scratch_.push_back(std::move(s));
    incoming_.clear();
  }
  for (auto& s : scratch_) finish(std::move(s), FinishReason::Cancelled);
  scratch_.clear();
  flush_to_disk();
  waiting_.store(0);
  snap_running_.store(0);
  snap_kv_used_.store(pool_->num_used());
  alive_.store(false);
}

bool Engine::is_stop_token(const Sequence& s, int32_t tok) const {
  const auto& eos = model_->config().eos_token_ids;
  if (std::find(eos.begin(), eos.end(), tok) != eos.end()) return true;
  const auto& stop = s.req.stop_token_ids;
  return std::find(stop.begin(), stop.end(), tok) != stop.end();
}

void Engine::finish(std::unique_ptr<Sequence> seq, FinishReason reason, const std::string& error) {
  // Blocks are already back in the pool: publish that before the client hears the end, so
  // anyone who saw the stream finish also sees the pool without it.
  snap_running_.store(scheduler_->num_running());
  snap_kv_used_.store(pool_->num_used());
  seq->stream->finish(reason, error);
  metrics_.finished->Add({{"finish_reason", finish_reason_name(reason)}}).Increment();
  metrics_.e2e->Observe(std::chrono::duration<double>(Clock::now() - seq->arrival).count());
  if (reason == FinishReason::Error) metrics_.request_error("engine");
  in_flight_.fetch_sub(1);
}

void Engine::fail_all(const std::string& error) {
  scratch_.clear();
  scheduler_->take_all(&scratch_);
  for (auto& s : scratch_) finish(std::move(s), FinishReason::Error, error);
  scratch_.clear();
}

PrefixTierHooks Engine::open_disk_tier() {
  disk_ = std::make_unique<DiskTier>(cfg_.disk_tier_dir, uint64_t(cfg_.disk_tier_gb * double(1ull << 30)));
  spdlog::info("disk tier: {} ({} entries, {:.3f} GiB of {:.3f})", cfg_.disk_tier_dir, disk_->entries(),
               double(disk_->bytes_used()) / double(1ull << 30), cfg_.disk_tier_gb);
  const size_t block_bytes = model_->kv_bytes_per_block(cfg_.block_size);
  const size_t state_bytes = model_->state_bytes_per_slot();
  block_buf_.resize(std::max<size_t>(block_bytes, 1));
  // Evicted entries are still intact when the hooks run: copy them out before they are reused.
  pool_->set_evict_hook([this](int32_t id, uint64_t h) { write_block_to_disk(id, h); });
  snapshots_->set_evict_hook([this](uint64_t h, const void* st) { write_state_to_disk(h, st); });
  PrefixTierHooks t;
  t.has_block = [this, block_bytes](uint64_t h) {
    return block_bytes == 0 || disk_->contains(DiskTier::Kind::Block, h);
  };
  t.has_state = [this](uint64_t h) { return disk_->contains(DiskTier::Kind::State, h); };
  t.load_block = [this, block_bytes](int32_t id, uint64_t h) {
    if (block_bytes == 0) return true;  // no attention layers: a block holds nothing
    if (!disk_->get(DiskTier::Kind::Block, h, block_buf_.data(), block_bytes)) return false;
    model_->load_block(id, block_buf_.data());
    metrics_.disk_tier_loads->Increment();
    return true;
  };
  t.load_state = [this, state_bytes](uint64_t h) {
    void* dst = snapshots_->insert(h);
    if (dst == nullptr) return false;
    if (!disk_->get(DiskTier::Kind::State, h, dst, state_bytes)) {
      snapshots_->erase(h);
      return false;
    }
    metrics_.disk_tier_loads->Increment();
    return true;
  };
  return t;
}

bool Engine::write_block_to_disk(int32_t id, uint64_t h) {
  const size_t block_bytes = model_->kv_bytes_per_block(cfg_.block_size);
  if (block_bytes == 0 || disk_->contains(DiskTier::Kind::Block, h)) return false;
  model_->save_block(id, block_buf_.data());
  disk_->put(DiskTier::Kind::Block, h, block_buf_.data(), block_bytes);
  return true;
}

bool Engine::write_state_to_disk(uint64_t h, const void* state) {
  if (disk_->contains(DiskTier::Kind::State, h)) return false;
  disk_->put(DiskTier::Kind::State, h, state, model_->state_bytes_per_slot());
  return true;
}

// At shutdown everything still cached goes to the disk, so the next start resumes warm.
void Engine::flush_to_disk() {
  if (!disk_) return;
  size_t blocks = 0, states = 0;
  pool_->for_each_published([&](int32_t id, uint64_t h) { blocks += write_block_to_disk(id, h); });
  snapshots_->for_each([&](uint64_t h, const void* st) { states += write_state_to_disk(h, st); });
  spdlog::info("disk tier: wrote {} blocks and {} states at shutdown ({} entries, {:.3f} GiB)", blocks, states,
               disk_->entries(), double(disk_->bytes_used()) / double(1ull << 30));
}

void Engine::save_snapshots(const StepPlan& plan) {
  for (const StateSave& sv : plan.saves) {
    void* dst = snapshots_->insert(sv.hash);
    if (dst == nullptr) continue;  // a store with no room
    model_->save_state(sv.slot, dst);
    metrics_.snapshot_saves->Increment();
  }
}

void Engine::step() {
  scratch_.clear();
  if (cancel_all_.exchange(false))
    scheduler_->take_all(&scratch_);
  else
    scheduler_->take_cancelled(&scratch_);
  for (auto& s : scratch_) finish(std::move(s), FinishReason::Cancelled);
  scratch_.clear();

  const StepPlan& plan = scheduler_->schedule();
  if (plan.num_preempted) metrics_.preemptions->Increment(plan.num_preempted);
  waiting_.store(scheduler_->num_waiting());
  auto publish = [&] {
    snap_running_.store(scheduler_->num_running());
    snap_kv_used_.store(pool_->num_used());
    snap_cached_.store(pool_->num_cached());
    snap_snapshots_.store(snapshots_ ? snapshots_->size() : 0);
    metrics_.cached_blocks->Set(pool_->num_cached());
    metrics_.snapshots_held->Set(snapshots_ ? snapshots_->size() : 0);
    // Counters mirror the cache's own totals (they only grow).
    const double be = double(pool_->num_evictions()) - metrics_.block_evictions->Value();
    if (be > 0) metrics_.block_evictions->Increment(be);
    const double se = double(snapshots_ ? snapshots_->num_evictions() : 0) - metrics_.snapshot_evictions->Value();
    if (se > 0) metrics_.snapshot_evictions->Increment(se);
    metrics_.requests_running->Set(scheduler_->num_running());
    metrics_.requests_waiting->Set(snapshot().waiting);
    metrics_.kv_pool_usage->Set(pool_->usage());
  };
  if (plan.empty()) {
    publish();
    return;
  }
  // Counted once per request, at its first admission (a recompute after preemption is not new).
  for (Sequence* s : plan.first_admitted) {
    metrics_.prompt_tokens->Increment(s->num_prompt);
    if (snapshots_) {
      metrics_.prefix_queries->Increment(s->num_prompt);
      metrics_.prefix_hits->Increment(s->num_cached_tokens);
    }
    s->stream->set_cached_tokens(s->num_cached_tokens);
  }

  const auto t_start = Clock::now();
  for (const StateRestore& r : plan.restores) model_->load_state(r.slot, r.state);
  if (!plan.restores.empty()) metrics_.snapshot_restores->Increment(double(plan.restores.size()));
  ForwardBatch batch{std::span<const int32_t>(plan.tokens),
                     std::span<const SeqChunk>(plan.chunks)};
  model_->forward(batch, logits_.data());
  save_snapshots(plan);
  steps_.fetch_add(1);
  metrics_.step_rows->Observe(double(plan.tokens.size()));
  metrics_.step_sequences->Observe(double(plan.chunks.size()));

  // Sample every sequence that asked for logits, in batch order; each draws from its own RNG.
  int row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const float* lg = logits_.data() + size_t(row) * size_t(vocab_);
    sampled_[size_t(row)] = sampler_.sample(lg, vocab_, s->req.sampling, s->rng);
    ++row;
  }
  scheduler_->commit_step();

  const auto now = Clock::now();
  row = 0;
  // Collected first and finished after the loop: finishing erases from the scheduler's running
  // list, which the plan's pointers must outlive.
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const float* lg = logits_.data() + size_t(row) * size_t(vocab_);
    const int32_t tok = sampled_[size_t(row)];
    ++row;
    s->tokens.push_back(tok);
    TokenOutput out;
    out.token = tok;
    if (s->req.logprobs >= 0) {
      out.logprob = Sampler::logprob_of(lg, vocab_, tok);
      if (s->req.logprobs > 0) sampler_.top_logprobs(lg, vocab_, s->req.logprobs, &out.top);
    }
    s->stream->push(std::move(out));
    metrics_.generation_tokens->Increment();
    if (!s->has_first_token) {
      s->has_first_token = true;
      metrics_.ttft->Observe(std::chrono::duration<double>(now - s->arrival).count());
    } else {
      metrics_.itl->Observe(std::chrono::duration<double>(now - s->last_token).count());
    }
    s->last_token = now;
  }
  // Finishing reorders the running list, so decide first, then remove.
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    FinishReason reason = FinishReason::None;
    if (!s->req.ignore_eos && is_stop_token(*s, s->tokens.back()))
      reason = FinishReason::Stop;
    else if (s->num_generated() >= s->req.max_tokens || int(s->tokens.size()) >= cfg_.max_model_len)
      reason = FinishReason::Length;
    if (reason != FinishReason::None) finish(scheduler_->finish(s), reason);
  }
  metrics_.step_seconds->Observe(std::chrono::duration<double>(Clock::now() - t_start).count());
  publish();
}

}  // namespace ds
