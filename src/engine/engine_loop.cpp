#include "engine/engine_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "engine/cache_identity.h"

namespace ds {

namespace {

PrefixCacheConfig cache_config(const EngineConfig& c, const Model& model) {
  PrefixCacheConfig p;
  p.num_blocks = c.num_kv_blocks;
  p.block_size = c.block_size;
  p.enabled = c.prefix.enabled;
  if (p.enabled) {
    p.num_snapshots = c.prefix.num_state_snapshots;
    p.snapshot_interval = c.prefix.snapshot_interval;
    p.decode_snapshots = c.prefix.decode_snapshots;
    p.seed = cache_chain_seed(model, c.block_size);
    p.disk_dir = c.prefix.disk_tier_dir;
    p.disk_bytes = uint64_t(c.prefix.disk_tier_gb * double(1ull << 30));
  }
  return p;
}

// A Prometheus counter that follows a cumulative count kept elsewhere (they only grow).
void mirror(prometheus::Counter* c, uint64_t total) {
  const double d = double(total) - c->Value();
  if (d > 0) c->Increment(d);
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Model> model, EngineConfig cfg) : model_(std::move(model)), cfg_(std::move(cfg)) {
  DS_CHECK(model_ != nullptr, "engine: no model");
  resolve_engine_config(&cfg_, *model_);
  vocab_ = model_->config().vocab_size;
  model_->allocate(runtime_limits(cfg_));
  cache_ = std::make_unique<PrefixCache>(cache_config(cfg_, *model_), *model_);
  for (const CacheCounter& c : cache_->counters()) cache_counters_.push_back(metrics_.add_counter(c.name, c.help));
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerLimits{cfg_.max_num_seqs, cfg_.max_num_batched_tokens, cfg_.max_model_len}, *cache_);
  sampler_ = Sampler(vocab_);
  // Everything the step loop touches is sized here, for the largest step the settings allow.
  logits_.resize(size_t(cfg_.max_num_seqs) * size_t(vocab_));
  sampled_.resize(size_t(cfg_.max_num_seqs));
  scratch_.reserve(size_t(cfg_.max_num_seqs) + size_t(cfg_.max_waiting));
  alive_ = true;  // set before the thread starts so /health is right as soon as we return
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<RequestStream> EngineLoop::submit(Request req) {
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

void EngineLoop::cancel_all() {
  cancel_all_.store(true);
  cv_.notify_one();
}

void EngineLoop::stop() {
  closed_.store(true);
  stop_.store(true);
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineSnapshot EngineLoop::snapshot() const {
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

void EngineLoop::run() {
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
    try {
      admit_and_retire(&arrived);
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
  cache_->flush();
  waiting_.store(0);
  snap_running_.store(0);
  snap_kv_used_.store(cache_->pool().num_used());
  alive_.store(false);
}

// ---- the step ----

void EngineLoop::step() {
  const StepPlan& plan = scheduler_->schedule();
  if (plan.num_preempted) metrics_.preemptions->Increment(plan.num_preempted);
  waiting_.store(scheduler_->num_waiting());
  if (plan.empty()) {
    publish_counts();
    return;
  }
  count_admissions(plan);
  const auto t_start = Clock::now();
  forward(plan);
  sample(plan);
  scheduler_->commit_step();
  stream(plan);
  finish_done(plan);
  metrics_.step_seconds->Observe(std::chrono::duration<double>(Clock::now() - t_start).count());
  publish_counts();
}

void EngineLoop::admit_and_retire(std::vector<std::unique_ptr<Sequence>>* arrived) {
  for (auto& s : *arrived) scheduler_->add(std::move(s));
  arrived->clear();
  scratch_.clear();
  if (cancel_all_.exchange(false))
    scheduler_->take_all(&scratch_);
  else
    scheduler_->take_cancelled(&scratch_);
  for (auto& s : scratch_) finish(std::move(s), FinishReason::Cancelled);
  scratch_.clear();
}

void EngineLoop::count_admissions(const StepPlan& plan) {
  // Counted once per request, at its first admission (a recompute after preemption is not new).
  for (Sequence* s : plan.first_admitted) {
    metrics_.prompt_tokens->Increment(s->num_prompt);
    if (cache_->enabled()) {
      metrics_.prefix_queries->Increment(s->num_prompt);
      metrics_.prefix_hits->Increment(s->num_cached_tokens);
    }
    s->stream->set_cached_tokens(s->num_cached_tokens);
  }
}

void EngineLoop::forward(const StepPlan& plan) {
  for (const StateRestore& r : plan.restores) cache_->restore_state(r.slot, r.state);
  ForwardBatch batch{std::span<const int32_t>(plan.tokens), std::span<const SeqChunk>(plan.chunks)};
  model_->forward(batch, logits_.data());
  for (const StateSave& sv : plan.saves) cache_->save_state(sv.slot, sv.hash);
  // Before any stream can end: a client that saw its request finish sees the cache's counts.
  mirror_cache_counters();
  steps_.fetch_add(1);
  metrics_.step_rows->Observe(double(plan.tokens.size()));
  metrics_.step_sequences->Observe(double(plan.chunks.size()));
}

void EngineLoop::sample(const StepPlan& plan) {
  // Every sequence that asked for logits, in batch order; each draws from its own random stream.
  int row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const SamplingParams& p = s->req.sampling;
    const SamplingFilter f{p.temperature, p.top_k, p.top_p, p.min_p};
    const float* lg = logits_.data() + size_t(row) * size_t(vocab_);
    // Greedy draws nothing, so a request's stream advances only when it samples.
    sampled_[size_t(row)] = sampler_.sample(lg, vocab_, f, f.greedy() ? 0.0 : s->rng.uniform());
    ++row;
  }
}

void EngineLoop::stream(const StepPlan& plan) {
  const auto now = Clock::now();
  int row = 0;
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
}

void EngineLoop::finish_done(const StepPlan& plan) {
  // After stream(): a request hears its last token before its end. Finishing erases only the
  // finished sequence from the scheduler's running list; the plan's other pointers stay valid.
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
}

void EngineLoop::publish_counts() {
  const BlockPool& pool = cache_->pool();
  snap_running_.store(scheduler_->num_running());
  snap_kv_used_.store(pool.num_used());
  snap_cached_.store(cache_->num_cached_blocks());
  snap_snapshots_.store(cache_->num_snapshots());
  metrics_.cached_blocks->Set(cache_->num_cached_blocks());
  metrics_.snapshots_held->Set(cache_->num_snapshots());
  mirror_cache_counters();
  metrics_.requests_running->Set(scheduler_->num_running());
  metrics_.requests_waiting->Set(snapshot().waiting);
  metrics_.kv_pool_usage->Set(pool.usage());
}

void EngineLoop::mirror_cache_counters() {
  const auto counts = cache_->counters();
  for (size_t i = 0; i < counts.size(); ++i) mirror(cache_counters_[i], counts[i].value);
}

// ---- finishing ----

bool EngineLoop::is_stop_token(const Sequence& s, int32_t tok) const {
  const auto& eos = model_->config().eos_token_ids;
  if (std::find(eos.begin(), eos.end(), tok) != eos.end()) return true;
  const auto& stop = s.req.stop_token_ids;
  return std::find(stop.begin(), stop.end(), tok) != stop.end();
}

void EngineLoop::finish(std::unique_ptr<Sequence> seq, FinishReason reason, const std::string& error) {
  // Blocks are already back in the pool: publish that before the client hears the end, so
  // anyone who saw the stream finish also sees the pool without it.
  snap_running_.store(scheduler_->num_running());
  snap_kv_used_.store(cache_->pool().num_used());
  seq->stream->finish(reason, error);
  metrics_.finished->Add({{"finish_reason", finish_reason_name(reason)}}).Increment();
  metrics_.e2e->Observe(std::chrono::duration<double>(Clock::now() - seq->arrival).count());
  if (reason == FinishReason::Error) metrics_.request_error("engine");
  in_flight_.fetch_sub(1);
}

void EngineLoop::fail_all(const std::string& error) {
  scratch_.clear();
  scheduler_->take_all(&scratch_);
  for (auto& s : scratch_) finish(std::move(s), FinishReason::Error, error);
  scratch_.clear();
}

}  // namespace ds
