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

// What n rows starting at position `start` attend, in thousands of tokens (the cost model's
// context term: attention reads every earlier position once per row).
double attention_work(int start, int n) { return double(n) * (double(start) + 0.5 * double(n + 1)) * 1e-3; }

// An emitted_ entry for a row whose constraint allowed no token.
constexpr int32_t kNoToken = -1;

SamplingFilter filter_of(const SamplingParams& p) { return {p.temperature, p.top_k, p.top_p, p.min_p}; }

// The draws a drafter makes for a decoding sequence's round, one per draft token in order. A
// reproducible request's draft token at position p takes uniform_at(seed, p), the number its
// verification draws there: the draft samples with the target's own draw (coupled), so a draft
// close to the target proposes the target's token. Others draw from the request's stream.
std::function<double()> draft_uniform(Sequence& s) {
  if (!s.req.sampling.reproducible) {
    Rng* rng = &s.rng;
    return [rng] { return rng->uniform(); };
  }
  // d_1's position is the one after the pending token's; each call moves on by one.
  return [seed = s.req.sampling.seed, position = uint64_t(s.tokens.size())]() mutable {
    return uniform_at(seed, position++);
  };
}

// A Prometheus counter that follows a cumulative count kept elsewhere (they only grow).
void mirror(prometheus::Counter* c, uint64_t total) {
  const double d = double(total) - c->Value();
  if (d > 0) c->Increment(d);
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Model> model, EngineConfig cfg) : model_(std::move(model)), cfg_(std::move(cfg)) {
  DS_CHECK(model_ != nullptr, "engine: no model");
  // The draft runs on the target's threads (one pool: the two never spin against each other).
  std::unique_ptr<Model> draft;
  // The draft folder's config.json says which kind of drafter it is; read once, here.
  const bool parallel = cfg_.spec.has_draft_model() && is_dspark_dir(cfg_.spec.draft_model);
  cfg_.spec.parallel_drafter = parallel;
  if (cfg_.spec.has_draft_model() && !parallel) draft = Model::load_sharing_threads(cfg_.spec.draft_model, *model_);
  model_->set_kv_dtype(cfg_.kv_cache_dtype);
  if (draft) draft->set_kv_dtype(cfg_.kv_cache_dtype);
  model_->set_activation_dtype(cfg_.activation_dtype);
  if (draft) draft->set_activation_dtype(cfg_.activation_dtype);
  resolve_engine_config(&cfg_, *model_, draft.get());
  vocab_ = model_->config().vocab_size;
  const RuntimeLimits limits = runtime_limits(cfg_);
  const int K = cfg_.spec.num_speculative_tokens;
  if (parallel) {
    pdrafter_ = std::make_unique<ParallelDrafter>(cfg_.spec.draft_model, *model_, cfg_.spec.draft_sample, K,
                                                  cfg_.spec.confidence_threshold);
    pdrafter_->set_activation_dtype(cfg_.activation_dtype);
    // The drafter takes a chunk's last context_window committed rows; a verify chunk of K + 1
    // rows may commit only its first, so K more rows at the end must be tapped too.
    model_->set_hidden_taps(pdrafter_->config().target_layer_ids, pdrafter_->config().context_window + K);
  }
  model_->allocate(limits);
  if (pdrafter_) {
    pdrafter_->allocate(cfg_.max_num_seqs, limits.max_batch_tokens);
    pjobs_.reserve(size_t(cfg_.max_num_seqs));
    pseqs_.reserve(size_t(cfg_.max_num_seqs));
  }
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
  if (draft) {
    drafter_ = std::make_unique<Drafter>(std::move(draft), cfg_.spec.draft_sample, K);
    drafter_->allocate(limits);
    spec_memory_ = std::make_unique<SpecCacheMemory>(*model_, drafter_->model(), cfg_.block_size);
    jobs_.reserve(size_t(cfg_.max_num_seqs));
  }
  if (drafter_ || pdrafter_) {
    if (cfg_.spec.synthetic()) {
      synthetic_ = std::make_unique<SyntheticAcceptance>(cfg_.spec.acceptance_length, K);
      metrics_.spec_synthetic->Add({{"source", cfg_.spec.acceptance_source}}).Set(cfg_.spec.acceptance_length);
    }
    if (cfg_.spec.draft_sample == DraftSample::Probabilistic)
      draft_probs_.resize(size_t(cfg_.max_num_seqs) * size_t(K) * size_t(vocab_));
  }
  if (cfg_.spec.enabled()) {
    verifier_ = std::make_unique<Verifier>(vocab_);
    for (int i = 1; i <= K; ++i) {
      position_drafted_.push_back(&metrics_.spec_position_drafted->Add({{"position", std::to_string(i)}}));
      position_accepted_.push_back(&metrics_.spec_position_accepted->Add({{"position", std::to_string(i)}}));
    }
  }
  if (cfg_.spec.source == DraftSource::Suffix) proposer_ = std::make_unique<SuffixProposer>(cfg_.spec.suffix);
  if (cfg_.spec.auto_k) {
    cost_ = std::make_unique<StepCostModel>();
    acceptance_ = std::make_unique<AcceptanceModel>(K);
  }
  CacheMemory& memory = spec_memory_ ? static_cast<CacheMemory&>(*spec_memory_) : static_cast<CacheMemory&>(*model_);
  cache_ = std::make_unique<PrefixCache>(cache_config(cfg_, *model_, drafter_ ? &drafter_->model() : nullptr), memory);
  for (const CacheCounter& c : cache_->counters()) cache_counters_.push_back(metrics_.add_counter(c.name, c.help));
  SchedulerLimits sl{cfg_.max_num_seqs, cfg_.max_num_batched_tokens, cfg_.max_model_len};
  sl.spec_tokens = cfg_.spec.enabled() ? K : 0;
  sl.spec_window = cfg_.spec.window;
  sl.has_draft = drafter_ != nullptr;
  scheduler_ = std::make_unique<Scheduler>(sl, *cache_);
  sampler_ = Sampler(vocab_);
  processor_ = std::make_unique<LogitProcessor>(vocab_, model_->config().eos_token_ids);
  // Everything the step loop touches is sized here, for the largest step the settings allow.
  logits_.resize(size_t(limits.max_logit_rows) * size_t(vocab_));
  emitted_.resize(size_t(limits.max_logit_rows));
  for (auto* v : {&row_of_, &n_emitted_, &accepted_}) v->resize(size_t(cfg_.max_num_seqs) + 1);
  reason_.resize(size_t(cfg_.max_num_seqs) + 1);
  scratch_.reserve(size_t(cfg_.max_num_seqs) + size_t(cfg_.max_waiting));
  if (cost_) calibrate_step_cost(limits);
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
  plan_drafts();
  const auto t_proposed = Clock::now();
  StepPlan& plan = scheduler_->schedule();
  if (plan.num_preempted) metrics_.preemptions->Increment(plan.num_preempted);
  waiting_.store(scheduler_->num_waiting());
  if (plan.empty()) {
    publish_counts();
    return;
  }
  count_admissions(plan);
  if (verifier_) count_chosen(plan);
  mark[PhaseSchedule + 1] = Clock::now();
  // Claimed states go into their slots before the draft phase: a resumed sequence's draft
  // state is part of the restore (spec_decode/spec_memory.h), and the draft feeds the resumed prefill
  // chunk from it.
  for (const StateRestore& r : plan.restores) cache_->restore_state(r.slot, r.state);
  if (drafter_) draft(plan);
  mark[PhaseDraft + 1] = drafter_ ? Clock::now() : mark[PhaseDraft];  // zero: no draft phase
  forward(plan);
  mark[PhaseForward + 1] = Clock::now();
  sample(plan);
  mark[PhaseSample + 1] = Clock::now();
  accept(plan);
  mark[PhaseAccept + 1] = Clock::now();
  scheduler_->commit_step();
  mark[PhaseCommit + 1] = Clock::now();
  stream(plan);
  mark[PhaseStream + 1] = Clock::now();
  finish_done(plan);
  mark[PhaseFinish + 1] = Clock::now();
  const auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };

  StepSample s;
  for (int p = 0; p < kStepPhases; ++p) s.phase[p] = secs(mark[p], mark[p + 1]);
  // Suffix proposals and auto's choice ran before the schedule: they count as drafting.
  const double proposing = proposer_ || cost_ || pdrafter_ ? secs(mark[0], t_proposed) : 0.0;
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
  if (verifier_) {
    metrics_.spec_draft_seconds->Increment(s.phase[PhaseDraft]);
    int max_k = 0;
    for (int32_t k : plan.spec_k) max_k = std::max(max_k, int(k));
    if (max_k > 0) metrics_.spec_verify_seconds->Increment(s.phase[PhaseForward] + s.phase[PhaseSample]);
    if (cost_ && plan.chunks.size() == size_t(plan.num_decode)) {
      // Steps of decode and verify rows only: a prefill's attention (chunked, far cheaper per
      // position than a row's) would otherwise set the context price of draft rows. The whole
      // step but drafting (modelled per position): per-step work outside the forward
      // (accepting, streaming, finishing) is what a token saves when rounds commit several.
      double work = 0;
      for (const SeqChunk& c : plan.chunks) work += attention_work(c.start_pos, c.num_tokens);
      cost_->observe(s.rows, work, s.wall - s.phase[PhaseDraft]);
      metrics_.spec_cost_offset->Set(cost_->offset());
      metrics_.spec_cost_context->Set(cost_->slope());
      if (drafter_) cost_->observe_draft(max_k, s.phase[PhaseDraft] - proposing);
    }
  }
  publish_counts();
}

void EngineLoop::propose_parallel() {
  // One draft forward for every decoding sequence that may speculate; the proposals then go
  // where suffix drafting's go (Sequence::proposal), for the scheduler to plan verify chunks.
  const int K = cfg_.spec.num_speculative_tokens;
  pjobs_.clear();
  pseqs_.clear();
  for (const auto& up : scheduler_->running()) {
    Sequence* s = up.get();
    s->proposal.clear();
    if (s->pending() != 1 || s->req.processes_logits()) continue;
    s->proposal.assign(size_t(K), 0);
    ParallelDraftJob j;
    j.slot = s->slot;
    j.owner = s->stream->id();
    j.token = s->tokens[size_t(s->num_computed)];
    j.pos = s->num_computed;
    j.k = K;
    j.filter = filter_of(s->req.sampling);
    j.uniform = draft_uniform(*s);
    j.coupled = s->req.sampling.reproducible;
    j.tokens = s->proposal.data();
    if (pdrafter_->keeps_probs(j.filter)) j.q = draft_probs_.data() + size_t(s->slot) * size_t(K) * size_t(vocab_);
    pjobs_.push_back(std::move(j));
    pseqs_.push_back(s);
  }
  pdrafter_->propose(std::span<ParallelDraftJob>(pjobs_));
  for (size_t i = 0; i < pjobs_.size(); ++i) pseqs_[i]->proposal.resize(size_t(pjobs_[i].proposed));
}

void EngineLoop::observe_committed(const StepPlan& plan) {
  // The rows whose tokens are now committed, with their taps, become the drafter's context.
  const float* taps = model_->hidden_taps();
  const size_t width = pdrafter_->config().target_layer_ids.size() * size_t(model_->config().hidden_size);
  pdrafter_->begin_observe();
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const SeqChunk& c = plan.chunks[i];
    const int rows = plan.spec_k[i] > 0 ? plan.keep[i] : c.num_tokens;
    if (rows > 0)
      pdrafter_->add_observed(c.slot, plan.seqs[i]->stream->id(), c.start_pos, taps + size_t(c.token_offset) * width,
                              plan.tokens.data() + c.token_offset, rows);
  }
  pdrafter_->end_observe();
}

void EngineLoop::plan_drafts() {
  if (!proposer_ && !cost_ && !pdrafter_) return;
  const int K = cfg_.spec.num_speculative_tokens;
  if (pdrafter_) propose_parallel();
  candidates_.clear();
  candidate_seqs_.clear();
  // The step as it would be without speculation: its rows, and the context they attend.
  int base_rows = 0;
  double base_work = 0;
  for (const auto& up : scheduler_->running()) {
    Sequence* s = up.get();
    if (!pdrafter_) s->proposal.clear();
    s->spec_budget = 0;
    if (s->pending() != 1) {
      const int n = std::min(s->pending(), cfg_.max_num_batched_tokens);
      base_rows += n;  // a prefill: its rows (the total is capped below); its attention is not
      continue;        // in the fit (see step())
    }
    ++base_rows;
    base_work += attention_work(s->num_computed, 1);
    if (s->req.processes_logits()) continue;  // constrained and penalised rows never speculate
    int max_k = K;
    if (proposer_) {
      proposer_->observe(s->stream->id(), s->tokens);
      s->proposal = proposer_->propose(s->stream->id(), s->tokens, K).tokens;
      max_k = int(s->proposal.size());
      if (max_k == 0) metrics_.spec_no_proposal->Increment();
    } else if (pdrafter_) {
      max_k = int(s->proposal.size());
    }
    s->spec_budget = max_k;
    if (cost_ && max_k > 0) {
      if (s->acceptance.reached.empty()) s->acceptance = acceptance_->fresh();
      DraftCandidate c;
      c.max_k = max_k;
      c.context = attention_work(s->num_computed, 1);
      acceptance_->estimate(s->acceptance, &c.alpha);
      candidates_.push_back(std::move(c));
      candidate_seqs_.push_back(s);
    }
  }
  if (!cost_) return;
  const DraftChoice choice =
      choose_draft_lengths(candidates_, std::min(base_rows, cfg_.max_num_batched_tokens), base_work, *cost_);
  for (size_t i = 0; i < candidate_seqs_.size(); ++i) candidate_seqs_[i]->spec_budget = choice.k[i];
}

void EngineLoop::count_chosen(const StepPlan& plan) {
  // The draft length each decoding sequence got (the scheduler may cut auto's choice at a block
  // boundary or the length limit), and what auto expects of it.
  for (int i = 0; i < plan.num_decode; ++i) {
    const int k = plan.spec_k[size_t(i)];
    metrics_.spec_chosen_draft_tokens->Observe(double(k));
    if (acceptance_ && k > 0) {
      acceptance_->estimate(plan.seqs[size_t(i)]->acceptance, &alpha_);
      double cum = 1.0, expected = 0.0;
      for (int j = 0; j < k; ++j) expected += (cum *= alpha_[size_t(j)]);
      metrics_.spec_predicted_accepted_tokens->Increment(expected);
    }
  }
}

void EngineLoop::calibrate_step_cost(const RuntimeLimits& limits) {
  // Steps shaped like verify steps (chunks of K + 1 speculative rows after one committed token,
  // in free slots and blocks, rolled back after), timed at 1, 2, 4, ... rows: the cost model's
  // curve. Nothing is running yet; every sequence later starts its slot from position 0.
  const int per_seq = cfg_.spec.num_speculative_tokens + 1;
  const int bs = cfg_.block_size;
  const int blocks_per_chunk = (1 + per_seq + bs - 1) / bs;
  const int max_chunks = std::min(cfg_.max_num_seqs, cfg_.num_kv_blocks / blocks_per_chunk);
  const int max_rows = std::min({max_chunks * per_seq, limits.max_logit_rows, cfg_.max_num_batched_tokens});
  std::vector<int32_t> table(size_t(max_chunks) * size_t(blocks_per_chunk));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  std::vector<int32_t> tokens;
  std::vector<SeqChunk> chunks;
  std::vector<std::pair<int, double>> points;
  const int32_t tok = model_->config().bos_token_id >= 0 ? model_->config().bos_token_id : 0;
  // The committed token each slot's speculative rows follow (a speculative chunk never starts a
  // sequence).
  tokens.assign(size_t(max_chunks), tok);
  for (int c = 0; c < max_chunks; ++c) {
    SeqChunk ch;
    ch.slot = c;
    ch.block_table = table.data() + size_t(c) * size_t(blocks_per_chunk);
    ch.num_tokens = 1;
    ch.token_offset = c;
    chunks.push_back(ch);
  }
  // A few times: the first forwards also wake the threads and warm the caches.
  for (int rep = 0; rep < 5; ++rep)
    model_->forward({std::span<const int32_t>(tokens), std::span<const SeqChunk>(chunks)}, logits_.data());
  // Three sweeps over the sizes, the fastest of 3 runs each per sweep, the fastest over the
  // sweeps kept: noise (another process, a page fault) only ever adds time.
  std::vector<int> sizes;
  for (int rows = 1;; rows = std::min(rows * 2, max_rows)) {
    sizes.push_back(rows);
    if (rows >= max_rows) break;
  }
  std::vector<double> best_of(sizes.size(), 1e30);
  for (int sweep = 0; sweep < 3; ++sweep) {
    for (size_t si = 0; si < sizes.size(); ++si) {
      const int rows = sizes[si];
      tokens.assign(size_t(rows), tok);
      chunks.clear();
      for (int at = 0, c = 0; at < rows; ++c) {
        SeqChunk ch;
        ch.slot = c;
        ch.block_table = table.data() + size_t(c) * size_t(blocks_per_chunk);
        ch.start_pos = 1;
        ch.num_tokens = std::min(per_seq, rows - at);
        ch.token_offset = at;
        ch.num_logits = ch.num_tokens;
        ch.spec_lane = 0;
        at += ch.num_tokens;
        chunks.push_back(ch);
      }
      double& best = best_of[si];
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        model_->forward({std::span<const int32_t>(tokens), std::span<const SeqChunk>(chunks)}, logits_.data());
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
        for (const SeqChunk& ch : chunks) model_->commit_speculative(ch.slot, 0);
      }
    }
  }
  for (size_t si = 0; si < sizes.size(); ++si) points.emplace_back(sizes[si], best_of[si]);
  cost_->calibrate(points);
  if (cfg_.spec.test_row_cost_scale >= 0) cost_->set_row_cost_scale(cfg_.spec.test_row_cost_scale);
  if (drafter_) {
    // Until drafting is observed: a draft forward costs its share of the target's weight reads.
    const double share = double(drafter_->model().decode_weight_bytes()) / double(std::max<size_t>(model_->decode_weight_bytes(), 1));
    cost_->set_draft_cost(cost_->cost(1) * share);
  } else if (pdrafter_) {
    // A parallel round is drafted whole before the schedule (propose_parallel), so by the time
    // a length is chosen its cost is spent whatever the length: a verified position costs only
    // its verify row. (A price per position here made auto choose shorter rounds for nothing.)
    cost_->set_draft_cost(0.0);
  }
  std::string curve;
  for (const auto& [r, t] : points) curve += " " + std::to_string(r) + ":" + std::to_string(t * 1e3).substr(0, 6);
  spdlog::info("speculation auto: step cost (rows:ms){}", curve);
}

void EngineLoop::draft(StepPlan& plan) {
  // One job per planned chunk: decode rows and verify chunks feed what the draft has not fed
  // yet and propose; prefill chunks are mirrored so the draft's cache and state follow.
  jobs_.clear();
  const int K = cfg_.spec.num_speculative_tokens;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const SeqChunk& c = plan.chunks[i];
    Sequence* s = plan.seqs[i];
    DraftJob j;
    j.slot = c.slot;
    j.block_table = c.block_table;
    if (int(i) < plan.num_decode) {
      j.start = s->draft_computed;
      j.feed = std::span<const int32_t>(s->tokens.data() + s->draft_computed, size_t(s->num_computed + 1 - s->draft_computed));
      j.k = plan.spec_k[i];
      j.feed_last = plan.feed_last[i] != 0;
      j.filter = filter_of(s->req.sampling);
      j.uniform = draft_uniform(*s);
      j.coupled = s->req.sampling.reproducible;
      j.tokens = plan.tokens.data() + c.token_offset + 1;
      if (j.k > 0 && drafter_->keeps_probs(j.filter))
        j.q = draft_probs_.data() + size_t(c.slot) * size_t(K) * size_t(vocab_);
    } else {
      j.start = c.start_pos;
      j.feed = std::span<const int32_t>(plan.tokens.data() + c.token_offset, size_t(c.num_tokens));
    }
    jobs_.push_back(std::move(j));
  }
  drafter_->propose(std::span<DraftJob>(jobs_));
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
    const int k = plan.spec_k[i];
    if (k > 0) {
      VerifyRound r;
      r.k = k;
      r.draft = plan.tokens.data() + plan.chunks[i].token_offset + 1;
      r.target_logits = lg;
      r.vocab = vocab_;
      r.filter = f;
      if ((drafter_ && drafter_->keeps_probs(f)) || (pdrafter_ && pdrafter_->keeps_probs(f)))
        r.draft_probs = draft_probs_.data() + size_t(plan.chunks[i].slot) * size_t(cfg_.spec.num_speculative_tokens) * size_t(vocab_);
      Rng* rng = &s->rng;
      VerifyOutcome o;
      if (s->req.sampling.reproducible && !synthetic_) {
        // Exact match with one draw per row, row j's from (seed, its token's position): each
        // emitted token is the one plain sampling draws there, whatever was drafted (K, the
        // drafter, the batch), so the text is too.
        const uint64_t seed = s->req.sampling.seed;
        uint64_t position = s->tokens.size();
        const std::function<double()> at_position = [seed, &position] { return uniform_at(seed, position++); };
        o = verifier_->verify(SpecMethod::Greedy, r, at_position);
      } else {
        const std::function<double()> uniform = [rng] { return rng->uniform(); };
        o = synthetic_ ? verifier_->accept_synthetic(r, synthetic_->draw(k, uniform), uniform)
                       : verifier_->verify(cfg_.spec.method, r, uniform);
      }
      for (int j = 0; j < o.accepted; ++j) emitted_[size_t(row + j)] = r.draft[j];
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

void EngineLoop::accept(StepPlan& plan) {
  // The emitted tokens join their sequences, up to the first that ends the request. A verify
  // chunk keeps the tokens it fed that are now committed: the pending one and the accepted
  // draft tokens before the last emitted token (which is pending now).
  const auto t0 = Clock::now();
  bool rolled = false;
  int c = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
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
    const int k = plan.spec_k[i];
    if (k > 0) {
      const int slot = plan.chunks[i].slot;
      model_->commit_speculative(slot, m);
      if (drafter_) {
        const int keep_draft = std::min(m - 1, jobs_[i].spec_fed());
        drafter_->commit(slot, keep_draft);
        s->draft_computed = s->num_computed + 1 + keep_draft;
      }
      if (acceptance_) acceptance_->observe(s->acceptance, k, accepted_[size_t(c)]);
      plan.keep[i] = m;
      rolled = true;
      count_round(k, accepted_[size_t(c)]);
      s->spec_drafted += k;
      s->spec_accepted += accepted_[size_t(c)];
      ++s->spec_rounds;
    }
    ++c;
  }
  if (pdrafter_) observe_committed(plan);
  if (rolled) metrics_.spec_rollback_seconds->Increment(std::chrono::duration<double>(Clock::now() - t0).count());
}

void EngineLoop::count_round(int k, int accepted) {
  metrics_.spec_draft_tokens->Increment(k);
  metrics_.spec_accepted_tokens->Increment(accepted);
  metrics_.spec_acceptance_length->Observe(double(accepted + 1));
  for (int j = 0; j < k; ++j) {
    position_drafted_[size_t(j)]->Increment();
    if (j < accepted) position_accepted_[size_t(j)]->Increment();
  }
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
  if (proposer_) proposer_->retire(seq->stream->id(), std::span<const int32_t>(seq->tokens).subspan(size_t(seq->num_prompt)));
  if (verifier_) seq->stream->set_prediction_tokens(seq->spec_accepted, seq->spec_drafted - seq->spec_accepted, seq->spec_rounds);
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
