// Behind the engine's face (engine/engine.h): the submission queue the HTTP threads push to, and
// the engine thread, which owns the model, the prefix cache, the scheduler and every sequence
// and runs one step after another:
//   admit    take new requests in, retire cancelled ones;
//   propose  before the plan, with speculation: the speculator's early drafting (suffix, the
//            parallel drafter) and under auto each sequence's draft length (engine/speculation.h);
//   plan     the scheduler picks decode rows (verify chunks), prefill chunks and admissions;
//   draft    with a draft model: the speculator fills the verify chunks;
//   forward  restore claimed states, run the model over the flattened batch, save snapshots;
//   sample   one token per sequence that asked for logits, each from its own random stream;
//            a verify chunk's k + 1 rows go to the speculator's verifier instead;
//   accept   the tokens join their sequences (cut at a stop token or the length limit), and
//            the speculator rolls speculative states back to the accepted ones;
//   commit   the fed tokens count as computed; the cache publishes blocks that filled;
//   stream   tokens (and logprobs) to each request's stream;
//   finish   stop tokens, max_tokens and max_model_len end requests, freeing their blocks.
// Speculation is the speculator's alone: this file calls it at those points and names no drafter.
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
#include "engine/speculation.h"

namespace ds {

class EngineLoop {
 public:
  // `spec`: the speculator for cfg.spec (make_speculator), or null without speculation.
  EngineLoop(std::unique_ptr<Model> model, std::unique_ptr<Speculator> spec, EngineConfig cfg);
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
  void forward(const StepPlan& plan);
  void sample(const StepPlan& plan);
  void accept(const StepPlan& plan);
  void stream(const StepPlan& plan);
  void finish_done(const StepPlan& plan);
  void publish_counts();
  void mirror_cache_counters();

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
  // Per planned chunk: its tokens now committed (all of them, but a verify round's accepted
  // part), the step's outcome for the scheduler's commit.
  std::vector<int32_t> kept_;
  std::vector<FinishReason> reason_;

  // Speculative decoding (engine/speculation.h); null without it.
  std::unique_ptr<Speculator> spec_;
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
