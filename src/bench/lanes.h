// The load model: N lanes, each playing one session tree at a time and drawing the next when it
// ends. A lane's first session starts at a random point of its trace, after warm-up requests that
// prime its prefix; think and tool gaps are replayed, capped; subagents run on their own threads
// inside the lane and join their parent as the trace says.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "bench/prefix_model.h"
#include "bench/prompt_tokens.h"
#include "bench/record.h"
#include "bench/workload.h"

namespace ds::bench {

struct LoadConfig {
  int concurrency = 1;
  double duration_s = 60;       // measured phase, from the first measured send
  int warmup_requests_per_lane = 1;
  uint64_t seed = 1;
  int64_t max_requests = 0;     // measured requests to send; 0 = no limit
  double idle_gap_cap_s = 10;   // longest think / tool gap replayed
  double start_min_ratio = 0.25;
  double start_max_ratio = 0.75;
  double grace_s = 30;          // in-flight requests get this long after the end, then are cancelled
  // Polled by the run: 1 stops sending (first Ctrl-C), 2 also cancels in-flight requests.
  const std::atomic<int>* interrupt = nullptr;
  // Stops sending early once this share of at least 20 measured requests failed; 0 = never.
  double abort_failed_ratio = 0;
  // Mixed into every play's cache namespace. A sweep gives each point its own, drawn fresh per
  // run, so a server kept warm by an earlier point or run never hits on private blocks.
  uint64_t play_namespace = 0;
};

// Sends one prompt. Each lane and subagent thread makes its own (HTTP clients are per thread).
class RequestSender {
 public:
  virtual ~RequestSender() = default;
  virtual StreamResult send(const std::vector<int32_t>& prompt, int64_t max_tokens,
                            const std::atomic<bool>& cancel) = 0;
};
using SenderFactory = std::function<std::unique_ptr<RequestSender>()>;

// Live counters for the progress line.
struct ReplayCounters {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> done{0};  // measured requests finished, successfully or not
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> output_tokens{0};
  std::atomic<int64_t> in_flight{0};
};

struct ReplayOutput {
  std::vector<RequestRecord> records;  // in completion order
  double measure_start_s = -1;         // first measured send; -1 if none was sent
  double stop_s = -1;                  // when sending stopped
  bool interrupted = false;
  bool aborted_for_failures = false;
};

class Replay {
 public:
  Replay(const Workload& w, const PromptTokens& tokens, const LoadConfig& cfg,
         SenderFactory make_sender, Clock::time_point origin);

  // Runs the lanes to the end; blocks. `on_measure_start` runs once, on the lane about to send
  // the first measured request, before it is sent (the metrics scrape that opens the window).
  ReplayOutput run(const std::function<void()>& on_measure_start = {});

  const ReplayCounters& counters() const { return counters_; }
  double now_s() const;

 private:
  struct LaneState {
    int index = 0;
    std::atomic<int> claimed{0};  // requests this lane (its subagents included) has sent
  };
  struct Draw {
    const Session* session;
    uint64_t play;
  };

  void lane_main(LaneState& lane);
  void play(LaneState& lane, const Session& s, uint64_t play, size_t start, int depth,
            RequestSender& sender);
  Draw draw(const LaneState& lane, bool first);
  // Reserves the next request for `lane`: false when the run has stopped sending.
  bool claim(LaneState& lane, bool& warmup);
  bool sending() const { return !stop_sending_.load(); }
  bool sleep_s(double s);  // false when woken by the stop
  void stop_sending();

  const Workload& w_;
  const PromptTokens& tokens_;
  LoadConfig cfg_;
  SenderFactory make_sender_;
  Clock::time_point origin_;
  PrefixCacheModel prefix_model_;
  ReplayCounters counters_;

  std::mutex draw_mu_;
  size_t cursor_ = 0;
  uint64_t next_play_ = 0;

  std::mutex claim_mu_;
  int64_t measured_claimed_ = 0;
  double measure_start_s_ = -1;
  std::function<void()> on_measure_start_;

  std::mutex records_mu_;
  std::vector<RequestRecord> records_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stop_sending_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<double> stop_s_{-1};
};

}  // namespace ds::bench
