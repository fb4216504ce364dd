// Speculative decoding's seam in the engine (docs/speculative-decoding.md). The Speculator owns
// everything speculation adds to a step: the draft method (spec_decode/draft_method.h: a draft
// model, suffix drafting or the parallel drafter), the verifier, synthetic acceptance, auto's
// draft-length models and their calibration, and the speculation metrics. It is built before the
// engine, from resolved options and the target (make_speculator), and passed in like the target;
// the step calls it at fixed points and knows no drafter:
//   before_schedule  early proposals (suffix, parallel) and under auto each decoding sequence's
//                    draft length, set on the sequence for the scheduler;
//   on_plan          counts what the scheduler chose;
//   draft            in-plan drafting (a draft model) fills the verify chunks;
//   verify           a verify chunk's rows against its draft;
//   settle           after accept: the target's and the draft's states roll back to what stood;
//   after_accept     the draft's fed counts; the committed rows go to a method that observes them;
//   record_step      the step's drafting and verification times, auto's online fit;
//   retire           a finished sequence's usage and its output (suffix drafting keeps it).
// Internal to engine/: the engine's face only forward-declares it.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/cache_memory.h"
#include "engine/engine_config.h"
#include "engine/metrics.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_profile.h"
#include "kernels/sampling.h"
#include "model/model.h"
#include "spec_decode/draft_length.h"
#include "spec_decode/draft_method.h"
#include "spec_decode/spec_memory.h"
#include "spec_decode/synthetic_acceptance.h"
#include "spec_decode/verifier.h"

namespace ds {

// A request's sampling settings as the kernels take them.
SamplingFilter filter_of(const SamplingParams& p);

class Speculator {
 public:
  // `o` resolved (resolve_spec_options); `method` made from it for the target.
  Speculator(SpecOptions o, std::unique_ptr<DraftMethod> method);
  ~Speculator();
  Speculator(const Speculator&) = delete;
  Speculator& operator=(const Speculator&) = delete;

  const SpecOptions& options() const { return o_; }
  DraftMethod& method() { return *method_; }
  // The draft model whose memory mirrors the target's, or null.
  Model* mirror() { return method_->mirror(); }

  // ---- start-up, in the engine's constructor, in this order ----
  void set_dtypes(KvDtype kv, ActivationDtype act) { method_->set_dtypes(kv, act); }
  void prepare_target(Model& target) { method_->prepare_target(target); }
  // After the target allocates: the method's memory, the verifier and the metrics.
  void attach(Model& target, const EngineConfig& cfg, const RuntimeLimits& limits, EngineMetrics& metrics);
  // What the prefix cache stores: the target, or the target and its mirroring draft.
  CacheMemory& cache_memory();
  // auto: times verify-shaped steps of 1 .. the most rows a step can have, for the cost model
  // (`logits`: room for limits.max_logit_rows rows). Does nothing without auto.
  void calibrate(const RuntimeLimits& limits, float* logits);

  // ---- the step's fixed points ----
  // Whether before_schedule does anything (its time counts as drafting).
  bool plans_before_schedule() const { return method_->proposes_early() || cost_ != nullptr; }
  void before_schedule(const std::vector<std::unique_ptr<Sequence>>& running);
  void on_plan(const StepPlan& plan);
  bool drafts_in_plan() const { return method_->drafts_in_plan(); }
  void draft(StepPlan& plan);
  // Verifies chunk i's round of k draft tokens at `logits` (its k + 1 rows).
  VerifyOutcome verify(Sequence& s, const StepPlan& plan, size_t i, int k, const float* logits);
  // Chunk i's round emitted m tokens (accepted + 1, or fewer where the request ended).
  void settle(Sequence& s, const StepPlan& plan, size_t i, int k, int accepted, int m);
  // After every chunk settled; `kept` per chunk: the tokens now committed. A mirroring draft's
  // fed counts follow the other chunks; an observing method gets the committed rows. t0: when
  // accepting began (the rollback time runs from it).
  void after_accept(const StepPlan& plan, std::span<const int32_t> kept, Clock::time_point t0);
  void record_step(const StepPlan& plan, const StepSample& s, double proposing);
  void retire(Sequence& s);

 private:
  void propose_early(const std::vector<std::unique_ptr<Sequence>>& running);
  void count_round(int k, int accepted);
  float* probs_of(int slot) { return draft_probs_.data() + size_t(slot) * size_t(o_.num_speculative_tokens) * size_t(vocab_); }

  SpecOptions o_;
  std::unique_ptr<DraftMethod> method_;
  Model* target_ = nullptr;
  EngineMetrics* metrics_ = nullptr;
  EngineConfig cfg_;  // the engine's, as resolved
  int vocab_ = 0;
  std::unique_ptr<SpecCacheMemory> spec_memory_;  // with a mirroring draft
  std::unique_ptr<Verifier> verifier_;
  std::unique_ptr<SyntheticAcceptance> synthetic_;
  // auto (spec_decode/draft_length.h): the step-cost model, per-position acceptance, and the
  // per-step scratch of the choice.
  std::unique_ptr<StepCostModel> cost_;
  double draft_share_ = 0;  // a draft position's price as a share of a one-row step, at start-up
  std::unique_ptr<AcceptanceModel> acceptance_;
  std::vector<DraftCandidate> candidates_;
  std::vector<Sequence*> candidate_seqs_;
  std::vector<double> alpha_;
  // Drafting's scratch, reused step after step: early jobs and their sequences, in-plan jobs.
  std::vector<ProposeJob> pjobs_;
  std::vector<Sequence*> pseqs_;
  std::vector<DraftJob> jobs_;
  std::vector<float> draft_probs_;  // [slot][K][vocab], probabilistic drafting only
  std::vector<prometheus::Counter*> position_drafted_, position_accepted_;
  bool rolled_ = false;  // a round settled this step
};

// Builds the speculator `o` asks for, against the target (a draft model is loaded here, on the
// target's threads), after resolving `o` in place; null without speculation. Throws ds::Error,
// one line, for settings or a draft that cannot run.
std::unique_ptr<Speculator> make_speculator(SpecOptions& o, Model& target);

}  // namespace ds
