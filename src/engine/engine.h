// The engine: one thread that owns the model, the KV block pool and all sequences, and runs the
// step loop (schedule, forward, sample, stream, finish). HTTP threads only submit requests and
// read their streams.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_pool.h"
#include "cache/disk_tier.h"
#include "cache/state_snapshots.h"
#include "core/error.h"
#include "engine/engine_config.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler.h"
#include "kernels/sampling.h"
#include "model/model.h"

namespace ds {

// submit() refuses with these; the server maps them to HTTP statuses.
class EngineBusy : public Error {  // waiting queue at its bound: 503 + Retry-After
 public:
  using Error::Error;
};
class EngineStopped : public Error {  // draining or stopped: 503
 public:
  using Error::Error;
};

struct EngineSnapshot {
  int running = 0;
  int waiting = 0;
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int cached_blocks = 0;
  int state_snapshots = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
};

class Engine {
 public:
  // Resolves and validates cfg against the model (throws ds::Error, one line), allocates the
  // model's runtime and starts the engine thread.
  Engine(std::unique_ptr<Model> model, EngineConfig cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Throws ds::Error for a request the engine cannot run (empty prompt, token id
  // outside the vocabulary, too long), EngineBusy when the waiting queue is full, EngineStopped
  // after stop(). The stream ends with Stop, Length, Cancelled or Error.
  std::shared_ptr<RequestStream> submit(Request req);

  // Ends every request with Cancelled (the grace period of a drain ran out). Thread-safe.
  void cancel_all();
  // Refuses new requests; in-flight ones keep running.
  void close();
  // Cancels everything and joins the engine thread. Idempotent.
  void stop();

  // True while the engine thread is running its loop (for /health).
  bool alive() const { return alive_.load(); }
  // Requests submitted and not yet finished (for draining).
  int in_flight() const { return in_flight_.load(); }
  EngineSnapshot snapshot() const;

  const EngineConfig& config() const { return cfg_; }
  const ModelConfig& model_config() const { return model_->config(); }
  EngineMetrics& metrics() { return metrics_; }

 private:
  void loop();
  void step();
  void finish(std::unique_ptr<Sequence> seq, FinishReason reason, const std::string& error = {});
  void fail_all(const std::string& error);
  void save_snapshots(const StepPlan& plan);
  PrefixTierHooks open_disk_tier();
  void flush_to_disk();
  // Copy a block or state to the disk unless it is there already; true when written.
  bool write_block_to_disk(int32_t id, uint64_t hash);
  bool write_state_to_disk(uint64_t hash, const void* state);
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
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<StateSnapshots> snapshots_;  // null when prefix caching is off
  std::unique_ptr<DiskTier> disk_;             // null without --disk-tier-dir
  std::vector<std::byte> block_buf_;           // one KV block on its way to or from the disk
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::vector<int32_t> sampled_;
  std::vector<float> sampled_logprob_;
  std::vector<std::unique_ptr<Sequence>> scratch_;
  std::vector<std::pair<int32_t, float>> top_;

  // Published for snapshot() from other threads.
  std::atomic<int> snap_running_{0}, snap_kv_used_{0}, snap_cached_{0}, snap_snapshots_{0};
  std::atomic<uint64_t> steps_{0};

  std::thread thread_;
};

}  // namespace ds
