#include "engine/engine_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "engine/cache_identity.h"
#include "grammar/token_constraint.h"

namespace ds {

namespace {

PrefixCacheConfig cache_config(const EngineConfig& c, const Model& model, const Model* draft) {
  PrefixCacheConfig p;
  p.num_blocks = c.num_kv_blocks;
  p.block_size = c.block_size;
  p.enabled = c.prefix.enabled;
  if (p.enabled) {
    p.num_snapshots = c.prefix.num_state_snapshots;
    p.snapshot_interval = c.prefix.snapshot_interval;
    p.decode_snapshots = c.prefix.decode_snapshots;
    p.seed = cache_chain_seed(model, c.block_size, draft);
    p.disk_dir = c.prefix.disk_tier_dir;
    p.disk_bytes = uint64_t(c.prefix.disk_tier_gb * double(1ull << 30));
  }
  return p;
}

// CPU time of the calling thread: what a step's wall time is, minus time off CPU.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// An emitted_ entry for a row whose constraint allowed no token.
constexpr int32_t kNoToken = -1;

// A Prometheus counter that follows a cumulative count kept elsewhere (they only grow).
void mirror(prometheus::Counter* c, uint64_t total) {
  const double d = double(total) - c->Value();
  if (d > 0) c->Increment(d);
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Model> model, std::unique_ptr<Speculator> spec, EngineConfig cfg)
    : model_(std::move(model)), cfg_(std::move(cfg)), spec_(std::move(spec)) {
  DS_CHECK(model_ != nullptr, "engine: no model");
  // The speculator comes with its options resolved (make_speculator): they are the engine's.
  if (spec_) cfg_.spec = spec_->options();
  DS_CHECK((spec_ != nullptr) == cfg_.spec.enabled(),
           spec_ ? "engine: a speculator was passed without speculation settings"
                 : "engine: speculation is set but no speculator was passed (make_speculator)");
  Model* draft = spec_ ? spec_->mirror() : nullptr;
  model_->set_kv_dtype(cfg_.kv_cache_dtype);
  model_->set_activation_dtype(cfg_.activation_dtype);
  if (spec_) spec_->set_dtypes(cfg_.kv_cache_dtype, cfg_.activation_dtype);
  resolve_engine_config(&cfg_, *model_, draft);
  vocab_ = model_->config().vocab_size;
  const RuntimeLimits limits = runtime_limits(cfg_);
  if (spec_) spec_->prepare_target(*model_);
  model_->allocate(limits);
  profiler_ = std::make_unique<StepProfiler>(metrics_, cfg_.profile_steps);
  metrics_.rank_layout->Add({{"kind", "tp"}}).Set(cfg_.ranks.tp);
  metrics_.rank_layout->Add({{"kind", "dcp"}}).Set(cfg_.ranks.dcp);
  metrics_.rank_layout->Add({{"kind", "ranks"}}).Set(cfg_.ranks.ranks);
  for (const RankMemory& m : model_->rank_memory()) {
    const std::string rank = std::to_string(m.rank);
    metrics_.rank_memory_bytes->Add({{"rank", rank}, {"kind", "weights"}}).Set(double(m.weights_bytes));
    metrics_.rank_memory_bytes->Add({{"rank", rank}, {"kind", "kv_pool"}}).Set(double(m.kv_pool_bytes));
    metrics_.rank_memory_bytes->Add({{"rank", rank}, {"kind", "state"}}).Set(double(m.state_bytes));
  }
  if (spec_) spec_->attach(*model_, cfg_, limits, metrics_);
  CacheMemory& memory = spec_ ? spec_->cache_memory() : static_cast<CacheMemory&>(*model_);
  cache_ = std::make_unique<PrefixCache>(cache_config(cfg_, *model_, draft), memory);
  for (const CacheCounter& c : cache_->counters()) cache_counters_.push_back(metrics_.add_counter(c.name, c.help));
  SchedulerLimits sl{cfg_.max_num_seqs, cfg_.max_num_batched_tokens, cfg_.max_model_len};
  sl.spec_tokens = spec_ ? cfg_.spec.num_speculative_tokens : 0;
  sl.spec_window = cfg_.spec.window;
  sl.has_draft = draft != nullptr;
  scheduler_ = std::make_unique<Scheduler>(sl, *cache_);
  sampler_ = Sampler(vocab_);
  processor_ = std::make_unique<LogitProcessor>(vocab_, model_->config().eos_token_ids);
  // Everything the step loop touches is sized here, for the largest step the settings allow.
  logits_.resize(size_t(limits.max_logit_rows) * size_t(vocab_));
  emitted_.resize(size_t(limits.max_logit_rows));
  for (auto* v : {&row_of_, &n_emitted_, &accepted_, &kept_}) v->resize(size_t(cfg_.max_num_seqs) + 1);
  reason_.resize(size_t(cfg_.max_num_seqs) + 1);
  scratch_.reserve(size_t(cfg_.max_num_seqs) + size_t(cfg_.max_waiting));
  if (spec_) spec_->calibrate(limits, logits_.data());
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
  s.draft_seconds = metrics_.spec_draft_seconds->Value();
  return s;
}

void EngineLoop::run() {
  std::vector<std::unique_ptr<Sequence>> arrived;
  while (!stop_.load()) {
    const auto t_loop = Clock::now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool idle = scheduler_->num_running() == 0 && scheduler_->num_waiting() == 0;
      if (idle && incoming_.empty() && !cancel_all_.load()) {
        cv_.wait_for(lock, std::chrono::milliseconds(50),
                     [&] { return !incoming_.empty() || stop_.load() || cancel_all_.load(); });
        idle_s_ += std::chrono::duration<double>(Clock::now() - t_loop).count();
      }
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
      const auto t_admit = Clock::now();
      admit_and_retire(&arrived);
      between_s_ += std::chrono::duration<double>(Clock::now() - t_admit).count();
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
  // Each phase ends at a mark; the profiler gets the differences (engine/step_profile.h).
  Clock::time_point mark[kStepPhases + 1];
  mark[0] = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  if (spec_) spec_->before_schedule(scheduler_->running());
  const auto t_proposed = Clock::now();
  StepPlan& plan = scheduler_->schedule();
  if (plan.num_preempted) metrics_.preemptions->Increment(plan.num_preempted);
  waiting_.store(scheduler_->num_waiting());
  if (plan.empty()) {
    publish_counts();
    return;
  }
  count_admissions(plan);
  if (spec_) spec_->on_plan(plan);
  mark[PhaseSchedule + 1] = Clock::now();
  // Claimed states go into their slots before the draft phase: a resumed sequence's draft
  // state is part of the restore (spec_decode/spec_memory.h), and the draft feeds the resumed prefill
  // chunk from it.
  for (const StateRestore& r : plan.restores) cache_->restore_state(r.slot, r.state);
  const bool drafting = spec_ && spec_->drafts_in_plan();
  if (drafting) spec_->draft(plan);
  mark[PhaseDraft + 1] = drafting ? Clock::now() : mark[PhaseDraft];  // zero: no draft phase
  forward(plan);
  mark[PhaseForward + 1] = Clock::now();
  sample(plan);
  mark[PhaseSample + 1] = Clock::now();
  accept(plan);
  mark[PhaseAccept + 1] = Clock::now();
  scheduler_->commit_step(std::span<const int32_t>(kept_));
  // Every snapshot is the scheduler's plan; the verify rounds' are known only now.
  for (const StateSave& sv : plan.commit_saves) cache_->save_state(sv.slot, sv.hash);
  mark[PhaseCommit + 1] = Clock::now();
  stream(plan);
  mark[PhaseStream + 1] = Clock::now();
  finish_done(plan);
  mark[PhaseFinish + 1] = Clock::now();
  const auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };

  StepSample s;
  for (int p = 0; p < kStepPhases; ++p) s.phase[p] = secs(mark[p], mark[p + 1]);
  // Early proposals and auto's choice ran before the schedule: they count as drafting.
  const double proposing = spec_ && spec_->plans_before_schedule() ? secs(mark[0], t_proposed) : 0.0;
  s.phase[PhaseSchedule] -= proposing;
  s.phase[PhaseDraft] += proposing;
  s.forward = model_->last_profile();
  s.wall = secs(mark[0], mark[kStepPhases]);
  s.cpu = thread_cpu_seconds() - cpu0;
  s.idle = idle_s_;
  s.between = between_s_;
  idle_s_ = between_s_ = 0;
  s.rows = int(plan.tokens.size());
  s.seqs = int(plan.chunks.size());
  s.decode_seqs = plan.num_decode;
  profiler_->record(s);

  // The step's duration as before the profiler (schedule excluded), and speculation's shares.
  const double step_s = secs(mark[PhaseSchedule + 1], mark[kStepPhases]);
  metrics_.step_seconds->Observe(step_s);
  metrics_.step_seconds_total->Increment(step_s);
  if (spec_) spec_->record_step(plan, s, proposing);
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
  int c = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const SamplingFilter f = filter_of(s->req.sampling);
    const float* lg = logits_.data() + size_t(row) * size_t(vocab_);
    row_of_[size_t(c)] = row;
    const int k = plan.spec[i].k;
    if (k > 0) {
      const VerifyOutcome o = spec_->verify(*s, plan, i, k, lg);
      const int32_t* draft = plan.tokens.data() + plan.chunks[i].token_offset + 1;
      for (int j = 0; j < o.accepted; ++j) emitted_[size_t(row + j)] = draft[j];
      emitted_[size_t(row + o.accepted)] = o.next;
      n_emitted_[size_t(c)] = o.accepted + 1;
      accepted_[size_t(c)] = o.accepted;
    } else {
      // A processed row (penalties, bias, a constraint) is a copy; the raw one stays for logprobs.
      const float* use = s->req.processes_logits() ? processor_->process(*s, lg) : lg;
      // Greedy draws nothing, so a request's stream advances only when it samples.
      const auto draw = [&] {
        return s->req.sampling.reproducible ? uniform_at(s->req.sampling.seed, s->tokens.size()) : s->rng.uniform();
      };
      emitted_[size_t(row)] = use ? sampler_.sample(use, vocab_, f, f.greedy() ? 0.0 : draw()) : kNoToken;
      n_emitted_[size_t(c)] = 1;
      accepted_[size_t(c)] = 0;
    }
    row += plan.chunks[i].num_logits;
    ++c;
  }
}

void EngineLoop::accept(const StepPlan& plan) {
  // The emitted tokens join their sequences, up to the first that ends the request. A verify
  // chunk keeps the tokens it fed that are now committed: the pending one and the accepted
  // draft tokens before the last emitted token (which is pending now).
  const auto t0 = Clock::now();
  int c = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    kept_[i] = plan.chunks[i].num_tokens;
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const int row = row_of_[size_t(c)];
    FinishReason reason = FinishReason::None;
    int m = 0;
    while (m < n_emitted_[size_t(c)] && reason == FinishReason::None) {
      const int32_t tok = emitted_[size_t(row + m)];
      if (tok == kNoToken) {
        // The constraint allows nothing more: its output is whole (an end token was excluded,
        // e.g. by ignore_eos) or, which the compilers never build, a dead end.
        reason = s->req.constraint && s->req.constraint->complete() ? FinishReason::Stop : FinishReason::Error;
        break;
      }
      s->tokens.push_back(tok);
      ++m;
      if (s->req.processes_logits() && !processor_->observe(*s, tok)) {
        reason = FinishReason::Error;
        break;
      }
      if (!s->req.ignore_eos && is_stop_token(*s, tok))
        reason = FinishReason::Stop;
      else if (s->num_generated() >= s->req.max_tokens || int(s->tokens.size()) >= cfg_.max_model_len)
        reason = FinishReason::Length;
    }
    n_emitted_[size_t(c)] = m;
    reason_[size_t(c)] = reason;
    const int k = plan.spec[i].k;
    if (k > 0) {
      spec_->settle(*s, plan, i, k, accepted_[size_t(c)], m);
      kept_[i] = m;
    }
    ++c;
  }
  if (spec_) spec_->after_accept(plan, std::span<const int32_t>(kept_), t0);
}

void EngineLoop::stream(const StepPlan& plan) {
  const auto now = Clock::now();
  int c = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    Sequence* s = plan.seqs[i];
    const int row = row_of_[size_t(c)], n = n_emitted_[size_t(c)];
    ++c;
    for (int j = 0; j < n; ++j) {
      // Token j of a round was drawn from (or accepted against) the target's row j.
      const float* lg = logits_.data() + size_t(row + j) * size_t(vocab_);
      TokenOutput out;
      out.token = emitted_[size_t(row + j)];
      if (s->req.logprobs >= 0) {
        out.logprob = Sampler::logprob_of(lg, vocab_, out.token);
        if (s->req.logprobs > 0) sampler_.top_logprobs(lg, vocab_, s->req.logprobs, &out.top);
      }
      s->stream->push(std::move(out));
    }
    metrics_.generation_tokens->Increment(n);
    if (!s->has_first_token) {
      s->has_first_token = true;
      metrics_.ttft->Observe(std::chrono::duration<double>(now - s->arrival).count());
    } else {
      metrics_.itl->Observe(std::chrono::duration<double>(now - s->last_token).count());
    }
    // The rest of a round's tokens arrive with its first.
    for (int j = 1; j < n; ++j) metrics_.itl->Observe(0.0);
    s->last_token = now;
  }
}

void EngineLoop::finish_done(const StepPlan& plan) {
  // After stream(): a request hears its last token before its end. Finishing erases only the
  // finished sequence from the scheduler's running list; the plan's other pointers stay valid.
  int c = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (plan.chunks[i].num_logits == 0) continue;
    const FinishReason reason = reason_[size_t(c++)];
    if (reason == FinishReason::Error)
      finish(scheduler_->finish(plan.seqs[i]), reason, "the output constraint allows no further token");
    else if (reason != FinishReason::None)
      finish(scheduler_->finish(plan.seqs[i]), reason);
  }
}

void EngineLoop::publish_counts() {
  const BlockPool& pool = cache_->pool();
  // Gauges first, snapshot last: a reader that sees the snapshot settled (tests poll it)
  // then also reads settled gauges from /metrics.
  metrics_.cached_blocks->Set(cache_->num_cached_blocks());
  metrics_.snapshots_held->Set(cache_->num_snapshots());
  mirror_cache_counters();
  const double lp = processor_->seconds() - metrics_.logits_processing_seconds->Value();
  if (lp > 0) metrics_.logits_processing_seconds->Increment(lp);
  mirror(metrics_.constrained_tokens, uint64_t(processor_->constrained_tokens()));
  metrics_.requests_running->Set(scheduler_->num_running());
  metrics_.requests_waiting->Set(snapshot().waiting);
  metrics_.kv_pool_usage->Set(pool.usage());
  snap_running_.store(scheduler_->num_running());
  snap_kv_used_.store(pool.num_used());
  snap_cached_.store(cache_->num_cached_blocks());
  snap_snapshots_.store(cache_->num_snapshots());
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
  if (spec_) spec_->retire(*seq);
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
