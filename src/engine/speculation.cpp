#include "engine/speculation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds {

namespace {

// What n rows starting at position `start` attend, in thousands of tokens (the cost model's
// context term: attention reads every earlier position once per row).
double attention_work(int start, int n) { return double(n) * (double(start) + 0.5 * double(n + 1)) * 1e-3; }

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
void mirror_count(prometheus::Counter* c, uint64_t total) {
  const double d = double(total) - c->Value();
  if (d > 0) c->Increment(d);
}

}  // namespace

SamplingFilter filter_of(const SamplingParams& p) { return {p.temperature, p.top_k, p.top_p, p.min_p}; }

Speculator::Speculator(SpecOptions o, std::unique_ptr<DraftMethod> method) : o_(std::move(o)), method_(std::move(method)) {
  DS_CHECK(method_ != nullptr, "speculation: no draft method");
}

Speculator::~Speculator() = default;

std::unique_ptr<Speculator> make_speculator(SpecOptions& o, Model& target) {
  resolve_spec_options(&o);  // without a draft source, refuses the flags that need one
  if (!o.enabled()) return nullptr;
  std::unique_ptr<DraftMethod> method = make_draft_method(o, target);
  return std::make_unique<Speculator>(o, std::move(method));
}

void Speculator::attach(Model& target, const EngineConfig& cfg, const RuntimeLimits& limits, EngineMetrics& metrics) {
  target_ = &target;
  cfg_ = cfg;
  o_ = cfg.spec;
  metrics_ = &metrics;
  vocab_ = target.config().vocab_size;
  const int K = o_.num_speculative_tokens;
  method_->allocate(limits);
  pjobs_.reserve(size_t(cfg.max_num_seqs));
  pseqs_.reserve(size_t(cfg.max_num_seqs));
  jobs_.reserve(size_t(cfg.max_num_seqs));
  if (Model* draft = method_->mirror()) spec_memory_ = std::make_unique<SpecCacheMemory>(target, *draft, cfg.block_size);
  if (o_.synthetic()) {
    synthetic_ = std::make_unique<SyntheticAcceptance>(o_.acceptance_length, K);
    metrics.spec_synthetic->Add({{"source", o_.acceptance_source}}).Set(o_.acceptance_length);
  }
  if (method_->may_keep_probs()) draft_probs_.resize(size_t(cfg.max_num_seqs) * size_t(K) * size_t(vocab_));
  verifier_ = std::make_unique<Verifier>(vocab_);
  for (int i = 1; i <= K; ++i) {
    position_drafted_.push_back(&metrics.spec_position_drafted->Add({{"position", std::to_string(i)}}));
    position_accepted_.push_back(&metrics.spec_position_accepted->Add({{"position", std::to_string(i)}}));
  }
  if (o_.auto_k) {
    cost_ = std::make_unique<StepCostModel>();
    acceptance_ = std::make_unique<AcceptanceModel>(K);
  }
}

CacheMemory& Speculator::cache_memory() {
  return spec_memory_ ? static_cast<CacheMemory&>(*spec_memory_) : static_cast<CacheMemory&>(*target_);
}

// ---- before the schedule ----

void Speculator::propose_early(const std::vector<std::unique_ptr<Sequence>>& running) {
  // One job for every decoding sequence that may speculate; the proposals go to
  // Sequence::spec.proposal, for the scheduler to plan verify chunks.
  const int K = o_.num_speculative_tokens;
  pjobs_.clear();
  pseqs_.clear();
  for (const auto& up : running) {
    Sequence* s = up.get();
    s->spec.proposal.clear();
    if (s->pending() != 1 || s->req.processes_logits()) continue;
    s->spec.proposal.assign(size_t(K), 0);
    ProposeJob j;
    j.slot = s->slot;
    j.owner = s->stream->id();
    j.history = std::span<const int32_t>(s->tokens);
    j.token = s->tokens[size_t(s->num_computed)];
    j.pos = s->num_computed;
    j.k = K;
    j.filter = filter_of(s->req.sampling);
    j.uniform = draft_uniform(*s);
    j.coupled = s->req.sampling.reproducible;
    j.tokens = s->spec.proposal.data();
    if (method_->keeps_probs(j.filter)) j.q = probs_of(s->slot);
    pjobs_.push_back(std::move(j));
    pseqs_.push_back(s);
  }
  method_->propose(std::span<ProposeJob>(pjobs_));
  for (size_t i = 0; i < pjobs_.size(); ++i) pseqs_[i]->spec.proposal.resize(size_t(pjobs_[i].proposed));
  mirror_count(metrics_->spec_no_proposal, method_->misses());
}

void Speculator::before_schedule(const std::vector<std::unique_ptr<Sequence>>& running) {
  if (!plans_before_schedule()) return;
  const int K = o_.num_speculative_tokens;
  const bool early = method_->proposes_early();
  if (early) propose_early(running);
  candidates_.clear();
  candidate_seqs_.clear();
  // The step as it would be without speculation: its rows, and the context they attend.
  int base_rows = 0;
  double base_work = 0;
  for (const auto& up : running) {
    Sequence* s = up.get();
    if (!early) s->spec.proposal.clear();
    s->spec.budget = 0;
    if (s->pending() != 1) {
      const int n = std::min(s->pending(), cfg_.max_num_batched_tokens);
      base_rows += n;  // a prefill: its rows (the total is capped below); its attention is not
      continue;        // in the fit (see record_step())
    }
    ++base_rows;
    base_work += attention_work(s->num_computed, 1);
    if (s->req.processes_logits()) continue;  // constrained and penalised rows never speculate
    const int max_k = early ? int(s->spec.proposal.size()) : K;
    s->spec.budget = max_k;
    if (cost_ && max_k > 0) {
      if (s->spec.acceptance.reached.empty()) s->spec.acceptance = acceptance_->fresh();
      DraftCandidate c;
      c.max_k = max_k;
      c.context = attention_work(s->num_computed, 1);
      acceptance_->estimate(s->spec.acceptance, &c.alpha);
      candidates_.push_back(std::move(c));
      candidate_seqs_.push_back(s);
    }
  }
  if (!cost_) return;
  const DraftChoice choice =
      choose_draft_lengths(candidates_, std::min(base_rows, cfg_.max_num_batched_tokens), base_work, *cost_);
  for (size_t i = 0; i < candidate_seqs_.size(); ++i) candidate_seqs_[i]->spec.budget = choice.k[i];
}

// ---- with the plan ----

void Speculator::on_plan(const StepPlan& plan) {
  // The draft length each decoding sequence got (the scheduler may cut auto's choice at a block
  // boundary or the length limit), and what auto expects of it.
  for (int i = 0; i < plan.num_decode; ++i) {
    const int k = plan.spec[size_t(i)].k;
    metrics_->spec_chosen_draft_tokens->Observe(double(k));
    if (acceptance_ && k > 0) {
      acceptance_->estimate(plan.seqs[size_t(i)]->spec.acceptance, &alpha_);
      double cum = 1.0, expected = 0.0;
      for (int j = 0; j < k; ++j) expected += (cum *= alpha_[size_t(j)]);
      metrics_->spec_predicted_accepted_tokens->Increment(expected);
    }
  }
}

void Speculator::draft(StepPlan& plan) {
  // One job per planned chunk: decode rows and verify chunks feed what the draft has not fed
  // yet and propose; prefill chunks are mirrored so the draft's cache and state follow. The
  // draft writes its tokens into the plan's placeholders.
  jobs_.clear();
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const SeqChunk& c = plan.chunks[i];
    Sequence* s = plan.seqs[i];
    DraftJob j;
    j.slot = c.slot;
    j.block_table = c.block_table;
    if (int(i) < plan.num_decode) {
      j.start = s->spec.draft_computed;
      j.feed = std::span<const int32_t>(s->tokens.data() + s->spec.draft_computed, size_t(s->num_computed + 1 - s->spec.draft_computed));
      j.k = plan.spec[i].k;
      j.feed_last = plan.spec[i].feed_last;
      j.filter = filter_of(s->req.sampling);
      j.uniform = draft_uniform(*s);
      j.coupled = s->req.sampling.reproducible;
      j.tokens = plan.tokens.data() + c.token_offset + 1;
      if (j.k > 0 && method_->keeps_probs(j.filter)) j.q = probs_of(c.slot);
    } else {
      j.start = c.start_pos;
      j.feed = std::span<const int32_t>(plan.tokens.data() + c.token_offset, size_t(c.num_tokens));
    }
    jobs_.push_back(std::move(j));
  }
  method_->draft(std::span<DraftJob>(jobs_));
}

// ---- verify and accept ----

VerifyOutcome Speculator::verify(Sequence& s, const StepPlan& plan, size_t i, int k, const float* logits) {
  const SeqChunk& c = plan.chunks[i];
  VerifyRound r;
  r.k = k;
  r.draft = plan.tokens.data() + c.token_offset + 1;
  r.target_logits = logits;
  r.vocab = vocab_;
  r.filter = filter_of(s.req.sampling);
  if (method_->keeps_probs(r.filter)) r.draft_probs = probs_of(c.slot);
  if (s.req.sampling.reproducible && !synthetic_) {
    // Exact match with one draw per row, row j's from (seed, its token's position): each
    // emitted token is the one plain sampling draws there, whatever was drafted (K, the
    // drafter, the batch), so the text is too.
    const uint64_t seed = s.req.sampling.seed;
    uint64_t position = s.tokens.size();
    const std::function<double()> at_position = [seed, &position] { return uniform_at(seed, position++); };
    return verifier_->verify(SpecMethod::Greedy, r, at_position);
  }
  Rng* rng = &s.rng;
  const std::function<double()> uniform = [rng] { return rng->uniform(); };
  return synthetic_ ? verifier_->accept_synthetic(r, synthetic_->draw(k, uniform), uniform)
                    : verifier_->verify(o_.method, r, uniform);
}

void Speculator::settle(Sequence& s, const StepPlan& plan, size_t i, int k, int accepted, int m) {
  const int slot = plan.chunks[i].slot;
  target_->commit_speculative(slot, m);
  if (method_->drafts_in_plan()) {
    const int keep_draft = std::min(m - 1, jobs_[i].spec_fed());
    method_->commit(slot, keep_draft);
    s.spec.draft_computed = s.num_computed + 1 + keep_draft;
  }
  if (acceptance_) acceptance_->observe(s.spec.acceptance, k, accepted);
  rolled_ = true;
  count_round(k, accepted);
  s.spec.drafted += k;
  s.spec.accepted += accepted;
  ++s.spec.rounds;
}

void Speculator::after_accept(const StepPlan& plan, std::span<const int32_t> kept, Clock::time_point t0) {
  if (method_->mirror()) {
    // A mirroring draft fed every chunk but the verify rounds in full (settle counted those).
    for (size_t i = 0; i < plan.chunks.size(); ++i)
      if (plan.spec[i].k == 0) plan.seqs[i]->spec.draft_computed = plan.seqs[i]->num_computed + plan.chunks[i].num_tokens;
  }
  if (method_->observes()) {
    // The rows whose tokens are now committed, with their taps, become the method's context.
    method_->begin_observe();
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      const SeqChunk& c = plan.chunks[i];
      const int rows = kept[i];
      if (rows > 0)
        method_->observe(c.slot, plan.seqs[i]->stream->id(), c.start_pos, c.token_offset, plan.tokens.data() + c.token_offset, rows);
    }
    method_->end_observe();
  }
  if (rolled_) metrics_->spec_rollback_seconds->Increment(std::chrono::duration<double>(Clock::now() - t0).count());
  rolled_ = false;
}

void Speculator::count_round(int k, int accepted) {
  metrics_->spec_draft_tokens->Increment(k);
  metrics_->spec_accepted_tokens->Increment(accepted);
  metrics_->spec_acceptance_length->Observe(double(accepted + 1));
  for (int j = 0; j < k; ++j) {
    position_drafted_[size_t(j)]->Increment();
    if (j < accepted) position_accepted_[size_t(j)]->Increment();
  }
}

// ---- after the step ----

void Speculator::record_step(const StepPlan& plan, const StepSample& s, double proposing) {
  metrics_->spec_draft_seconds->Increment(s.phase[PhaseDraft]);
  int max_k = 0;
  for (const ChunkSpec& cs : plan.spec) max_k = std::max(max_k, int(cs.k));
  if (max_k > 0) metrics_->spec_verify_seconds->Increment(s.phase[PhaseForward] + s.phase[PhaseSample]);
  if (cost_ && plan.chunks.size() == size_t(plan.num_decode)) {
    // Steps of decode and verify rows only: a prefill's attention (chunked, far cheaper per
    // position than a row's) would otherwise set the context price of draft rows. The whole
    // step but drafting (modelled per position): per-step work outside the forward
    // (accepting, streaming, finishing) is what a token saves when rounds commit several.
    double work = 0;
    for (const SeqChunk& c : plan.chunks) work += attention_work(c.start_pos, c.num_tokens);
    cost_->observe(s.rows, work, s.wall - s.phase[PhaseDraft]);
    metrics_->spec_cost_offset->Set(cost_->offset());
    metrics_->spec_cost_context->Set(cost_->slope());
    if (method_->drafts_in_plan()) {
      // Under the test hook the draft's price is not timed but follows the step's at its
      // start-up share, scaled as the rows are: one draft phase stretched by a busy machine
      // would otherwise price drafting out, and with nothing drafted it is never timed again.
      if (o_.test_row_cost_scale >= 0) {
        cost_->set_draft_cost(cost_->cost(1) * draft_share_ * o_.test_row_cost_scale);
      } else {
        cost_->observe_draft(max_k, s.phase[PhaseDraft] - proposing);
      }
    }
  }
}

void Speculator::retire(Sequence& s) {
  method_->retire(s.stream->id(), std::span<const int32_t>(s.tokens).subspan(size_t(s.num_prompt)));
  s.stream->set_prediction_tokens(s.spec.accepted, s.spec.drafted - s.spec.accepted, s.spec.rounds);
}

// ---- auto's calibration ----

void Speculator::calibrate(const RuntimeLimits& limits, float* logits) {
  if (!cost_) return;
  // Steps shaped like verify steps (chunks of K + 1 speculative rows after one committed token,
  // in free slots and blocks, rolled back after), timed at 1, 2, 4, ... rows: the cost model's
  // curve. Nothing is running yet; every sequence later starts its slot from position 0.
  Model& model = *target_;
  const int per_seq = o_.num_speculative_tokens + 1;
  const int bs = cfg_.block_size;
  const int blocks_per_chunk = (1 + per_seq + bs - 1) / bs;
  const int max_chunks = std::min(cfg_.max_num_seqs, cfg_.num_kv_blocks / blocks_per_chunk);
  const int max_rows = std::min({max_chunks * per_seq, limits.max_logit_rows, cfg_.max_num_batched_tokens});
  std::vector<int32_t> table(size_t(max_chunks) * size_t(blocks_per_chunk));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  std::vector<int32_t> tokens;
  std::vector<SeqChunk> chunks;
  std::vector<std::pair<int, double>> points;
  const int32_t tok = model.config().bos_token_id >= 0 ? model.config().bos_token_id : 0;
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
    model.forward({std::span<const int32_t>(tokens), std::span<const SeqChunk>(chunks)}, logits);
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
        model.forward({std::span<const int32_t>(tokens), std::span<const SeqChunk>(chunks)}, logits);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
        for (const SeqChunk& ch : chunks) model.commit_speculative(ch.slot, 0);
      }
    }
  }
  for (size_t si = 0; si < sizes.size(); ++si) points.emplace_back(sizes[si], best_of[si]);
  cost_->calibrate(points);
  if (o_.test_row_cost_scale >= 0) cost_->set_row_cost_scale(o_.test_row_cost_scale);
  draft_share_ = method_->draft_cost_share(model);
  const double scale = o_.test_row_cost_scale >= 0 ? o_.test_row_cost_scale : 1.0;
  cost_->set_draft_cost(cost_->cost(1) * draft_share_ * scale);
  std::string curve;
  for (const auto& [r, t] : points) curve += " " + std::to_string(r) + ":" + std::to_string(t * 1e3).substr(0, 6);
  spdlog::info("speculation auto: step cost (rows:ms){}", curve);
}

}  // namespace ds
