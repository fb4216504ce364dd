// Behind the engine's face (engine/engine.h): the submission queue the HTTP threads push to, and
// the engine thread, which owns the model, the prefix cache, the scheduler and every sequence
// and runs one step after another:
//   admit    take new requests in, retire cancelled ones;
//   plan     the scheduler picks decode rows, prefill chunks and admissions (cache lookups);
//   forward  restore claimed states, run the model over the flattened batch, save snapshots;
//   propose  before the plan, with suffix drafting: each decoding sequence's proposal from the
//            suffix tries (spec_decode/suffix_proposer.h); under auto, each one's draft length from
//            the cost model (spec_decode/draft_length.h);
//   draft    with a draft model: it feeds what the target feeds and proposes k tokens for
//            every decoding sequence (spec_decode/drafter.h), filling the verify chunks;
//   sample   one token per sequence that asked for logits, each from its own random stream;
//            a verify chunk's k + 1 rows go through the verifier instead (spec_decode/verifier.h);
//   accept   the tokens join their sequences (cut at a stop token or the length limit), and
//            speculative states roll back to the accepted ones;
//   commit   the fed tokens count as computed; the cache publishes blocks that filled;
//   stream   tokens (and logprobs) to each request's stream;
//   finish   stop tokens, max_tokens and max_model_len end requests, freeing their blocks.
// Internal to engine/: nothing outside includes this.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "engine/logit_processor.h"
#include "engine/scheduler.h"
#include "engine/step_profile.h"
#include "kernels/sampling.h"
#include "model/model.h"
#include "spec_decode/draft_length.h"
#include "spec_decode/drafter.h"
#include "spec_decode/parallel_drafter.h"
#include "spec_decode/spec_memory.h"
#include "spec_decode/suffix_proposer.h"
#include "spec_decode/synthetic_acceptance.h"
#include "spec_decode/verifier.h"

namespace ds {

class EngineLoop {
 public:
  EngineLoop(std::unique_ptr<Model> model, EngineConfig cfg);
  ~EngineLoop();

  std::shared_ptr<RequestStream> submit(Request req);
  void cancel_all();
  void close() { closed_.store(true); }
  void stop();
  bool alive() const { return alive_.load(); }
  int in_flight() const { return in_flight_.load(); }
  EngineSnapshot snapshot() const;
  const EngineConfig& config() const { return cfg_; }
  int vocab_size() const { return vocab_; }
  std::vector<RankMemory> rank_memory() const { return model_->rank_memory(); }
  EngineMetrics& metrics() { return metrics_; }

 private:
  void run();
  void step();
  // The phases of a step, in order.
  void admit_and_retire(std::vector<std::unique_ptr<Sequence>>* arrived);
  void count_admissions(const StepPlan& plan);
  // Before the schedule: suffix proposals, and under auto each decoding sequence's draft length.
  void plan_drafts();
  void propose_parallel();
  void observe_committed(const StepPlan& plan);
  void count_chosen(const StepPlan& plan);
  void draft(StepPlan& plan);
  void forward(const StepPlan& plan);
  void sample(const StepPlan& plan);
  void accept(StepPlan& plan);
  void count_round(int k, int accepted);
  void stream(const StepPlan& plan);
  void finish_done(const StepPlan& plan);
  void publish_counts();
  void mirror_cache_counters();
  // auto: times verify-shaped steps of 1 .. the most rows a step can have, for the cost model.
  void calibrate_step_cost(const RuntimeLimits& limits);

  void finish(std::unique_ptr<Sequence> seq, FinishReason reason, const std::string& error = {});
  void fail_all(const std::string& error);
  bool is_stop_token(const Sequence& s, int32_t tok) const;

  std::unique_ptr<Model> model_;
  EngineConfig cfg_;
  EngineMetrics metrics_;
  int vocab_ = 0;

  // Submission queue: HTTP threads push, the engine thread drains each step.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  // The scheduler's waiting queue as of its last step; submit() adds incoming_ to it and
  // refuses at max_waiting.
  std::atomic<int> waiting_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_all_{false};
  std::atomic<bool> alive_{false};
  uint64_t next_id_ = 1;

  // Engine-thread state.
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  // The cache's cumulative counts, exported as Prometheus counters in the same order.
  std::vector<prometheus::Counter*> cache_counters_;
  Sampler sampler_;
  std::unique_ptr<LogitProcessor> processor_;
  std::vector<float> logits_;
  // Per planned chunk with logits: its first logits row, the tokens it emits (at their rows in
  // emitted_), the draft tokens its verifier accepted, and how it ends its request.
  std::vector<int32_t> emitted_;
  std::vector<int32_t> row_of_, n_emitted_, accepted_;
  std::vector<FinishReason> reason_;

  // Speculative decoding (null / empty without it; drafter_ only with a draft model, proposer_
  // only with suffix drafting, cost_ and acceptance_ only under auto).
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<ParallelDrafter> pdrafter_;  // a parallel drafter instead (one forward a round)
  std::vector<ParallelDraftJob> pjobs_;
  std::vector<Sequence*> pseqs_;  // the sequence of each job in pjobs_
  std::unique_ptr<SuffixProposer> proposer_;
  std::unique_ptr<StepCostModel> cost_;
  std::unique_ptr<AcceptanceModel> acceptance_;
  std::vector<DraftCandidate> candidates_;
  std::vector<Sequence*> candidate_seqs_;
  std::vector<double> alpha_;
  std::unique_ptr<SpecCacheMemory> spec_memory_;
  std::unique_ptr<Verifier> verifier_;
  std::unique_ptr<SyntheticAcceptance> synthetic_;
  std::vector<DraftJob> jobs_;
  std::vector<float> draft_probs_;  // [slot][K][vocab], probabilistic drafting only
  std::vector<prometheus::Counter*> position_drafted_, position_accepted_;
  std::vector<std::unique_ptr<Sequence>> scratch_;
  // The step profiler, and what happened before the step it records next (docs/architecture.md).
  std::unique_ptr<StepProfiler> profiler_;
  double idle_s_ = 0, between_s_ = 0;

  // Published for snapshot() from other threads.
  std::atomic<int> snap_running_{0}, snap_kv_used_{0}, snap_cached_{0}, snap_snapshots_{0};
  std::atomic<uint64_t> steps_{0};

  std::thread thread_;
};

}  // namespace ds
