// The engine as the server sees it: submit a request and read its stream, the settings it runs
// with, its metrics and a snapshot of its counts. Behind it one thread owns the model, the
// prefix cache and every sequence, and runs the step loop (engine/engine_loop.h); nothing of
// the model, the cache or the scheduler shows through this header.
#pragma once
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "core/rank_memory.h"
#include "engine/engine_config.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/request_stream.h"

namespace ds {

class Model;
class EngineLoop;
class Speculator;

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
  double draft_seconds = 0;  // speculation: time spent drafting (deltaserve:spec_draft_seconds_total)
};

class Engine {
 public:
  // Resolves and validates cfg against the model (throws ds::Error, one line), allocates the
  // model's runtime and starts the engine thread. `spec` is speculative decoding's side, built
  // beside the target from resolved options (engine/speculation.h: make_speculator), or null
  // without it.
  Engine(std::unique_ptr<Model> model, std::unique_ptr<Speculator> spec, EngineConfig cfg);
  // The same, building the speculator cfg.spec asks for first (make_speculator).
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
  bool alive() const;
  // Requests submitted and not yet finished (for draining).
  int in_flight() const;
  EngineSnapshot snapshot() const;

  // The settings as resolved at start-up (derived sizes filled in).
  const EngineConfig& config() const;
  int vocab_size() const;
  // Each rank's memory when the model runs across ranks (distributed/); empty in one process.
  std::vector<RankMemory> rank_memory() const;
  EngineMetrics& metrics();

 private:
  std::unique_ptr<EngineLoop> loop_;
};

}  // namespace ds
