#include "bench/lanes.h"

#include <cmath>
#include <random>
#include <thread>

#include "bench/hash.h"
#include "core/error.h"

namespace ds::bench {

Replay::Replay(const Workload& w, const PromptTokens& tokens, const LoadConfig& cfg,
               SenderFactory make_sender, Clock::time_point origin)
    : w_(w), tokens_(tokens), cfg_(cfg), make_sender_(std::move(make_sender)), origin_(origin) {
  DS_CHECK(cfg.concurrency >= 1, "--concurrency must be at least 1");
  DS_CHECK(cfg.duration_s > 0, "--duration must be positive");
  DS_CHECK(cfg.warmup_requests_per_lane >= 0, "--warmup-requests-per-lane must not be negative");
  DS_CHECK(0 <= cfg.start_min_ratio && cfg.start_min_ratio <= cfg.start_max_ratio &&
               cfg.start_max_ratio <= 1,
           "need 0 <= --start-min-ratio <= --start-max-ratio <= 1");
  DS_CHECK(cfg.idle_gap_cap_s >= 0, "--idle-gap-cap must not be negative");
  DS_CHECK(!w.sessions.empty(), "the workload has no sessions");
  cursor_ = static_cast<size_t>(cfg.concurrency);
  next_play_ = static_cast<uint64_t>(cfg.concurrency);
}

double Replay::now_s() const {
  return std::chrono::duration<double>(Clock::now() - origin_).count();
}

void Replay::stop_sending() {
  if (!stop_sending_.exchange(true)) stop_s_ = now_s();
  std::lock_guard lock(stop_mu_);
  stop_cv_.notify_all();
}

bool Replay::sleep_s(double s) {
  if (s <= 0) return sending();
  std::unique_lock lock(stop_mu_);
  stop_cv_.wait_for(lock, std::chrono::duration<double>(s), [&] { return !sending(); });
  return sending();
}

Replay::Draw Replay::draw(const LaneState& lane, bool first) {
  // Every lane's first session is fixed by its index so a seed reproduces the opening mix;
  // later draws walk the trace in order, in whatever order lanes finish.
  std::lock_guard lock(draw_mu_);
  const size_t n = w_.sessions.size();
  if (first) return {&w_.sessions[static_cast<size_t>(lane.index) % n],
                     static_cast<uint64_t>(lane.index)};
  return {&w_.sessions[cursor_++ % n], next_play_++};
}

bool Replay::claim(LaneState& lane, bool& warmup) {
  if (!sending()) return false;
  warmup = lane.claimed.fetch_add(1) < cfg_.warmup_requests_per_lane;
  if (warmup) return true;
  std::lock_guard lock(claim_mu_);
  if (!sending()) return false;
  if (cfg_.max_requests > 0 && measured_claimed_ >= cfg_.max_requests) {
    stop_sending();
    return false;
  }
  if (measure_start_s_ < 0) {
    if (on_measure_start_) on_measure_start_();
    measure_start_s_ = now_s();
  }
  ++measured_claimed_;
  return true;
}

void Replay::play(LaneState& lane, const Session& s, uint64_t play_id, size_t start, int depth,
                  RequestSender& sender) {
  std::vector<std::thread> gating, background;
  auto join = [](std::vector<std::thread>& v) {
    for (auto& t : v) t.join();
    v.clear();
  };
  for (size_t i = start; i < s.requests.size(); ++i) {
    join(gating);  // the parent's next turn waits for the subagents it spawned
    const TraceRequest& r = s.requests[i];
    // A lane that just picked this session sends at once; later turns and a subagent's first
    // request wait the recorded gap, capped so a coffee break does not idle the lane.
    if ((i > start || depth > 0) && !sleep_s(std::min(r.delay_s, cfg_.idle_gap_cap_s))) break;
    bool warmup = false;
    if (!claim(lane, warmup)) break;

    RequestRecord rec;
    rec.lane = lane.index;
    rec.session = s.id;
    rec.play = play_id;
    rec.turn = static_cast<int>(i);
    rec.depth = depth;
    rec.warmup = warmup;
    rec.input_tokens = r.input_tokens;
    rec.max_tokens = r.output_tokens;
    std::vector<uint64_t> keys;
    const std::vector<int32_t> prompt = tokens_.build(r, mix64(cfg_.play_namespace, play_id), &keys);
    rec.theoretical_cached_tokens = prefix_model_.observe(keys, tokens_.block_size());

    ++counters_.sent;
    ++counters_.in_flight;
    rec.result = sender.send(prompt, r.output_tokens, cancel_);
    --counters_.in_flight;
    const StreamResult& res = rec.result;
    if (!warmup && !res.cancelled) {
      ++counters_.done;
      if (!res.error.empty()) ++counters_.failed;
      else
        counters_.output_tokens += res.completion_tokens >= 0
                                       ? res.completion_tokens
                                       : static_cast<int64_t>(res.chunk_s.size());
    }
    const bool stop_session = res.context_overflow || res.cancelled;
    {
      std::lock_guard lock(records_mu_);
      records_.push_back(std::move(rec));
    }
    // An overflow ends the session: every later turn carries a longer prompt.
    if (stop_session) break;
    for (const Spawn& sp : s.spawns) {
      if (sp.after_request != static_cast<int>(i)) continue;
      auto& group = sp.background ? background : gating;
      group.emplace_back([this, &lane, &sp, play_id, depth] {
        auto child_sender = make_sender_();
        play(lane, sp.child, play_id, 0, depth + 1, *child_sender);
      });
    }
  }
  // The tree drains before the lane recycles, background subagents included.
  join(gating);
  join(background);
}

void Replay::lane_main(LaneState& lane) {
  std::mt19937_64 rng(mix64(cfg_.seed, static_cast<uint64_t>(lane.index)));
  auto sender = make_sender_();
  bool first = true;
  while (sending()) {
    const Draw d = draw(lane, first);
    size_t start = 0;
    if (first) {
      // The opening session starts part-way through its trace, as a server mostly sees sessions
      // already under way; the warm-up requests are the turns just before that point.
      const double ratio =
          std::uniform_real_distribution<double>(cfg_.start_min_ratio, cfg_.start_max_ratio)(rng);
      const size_t n = d.session->requests.size();
      const size_t point = std::min(n - 1, static_cast<size_t>(std::floor(ratio * double(n))));
      const size_t warm = static_cast<size_t>(cfg_.warmup_requests_per_lane);
      start = point >= warm ? point - warm : 0;
      first = false;
    }
    play(lane, *d.session, d.play, start, 0, *sender);
  }
}

ReplayOutput Replay::run(const std::function<void()>& on_measure_start) {
  on_measure_start_ = on_measure_start;
  std::vector<std::unique_ptr<LaneState>> lanes;
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  for (int i = 0; i < cfg_.concurrency; ++i) {
    lanes.push_back(std::make_unique<LaneState>());
    lanes.back()->index = i;
  }
  for (auto& l : lanes)
    threads.emplace_back([this, &l, &finished] {
      lane_main(*l);
      ++finished;
    });
  // The watchdog: ends the measured phase on time, interrupts, and cancels what outlives the
  // grace period, so a run always stops by itself.
  while (finished.load() < cfg_.concurrency) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double now = now_s();
    double ms;
    {
      std::lock_guard lock(claim_mu_);
      ms = measure_start_s_;
    }
    const int irq = cfg_.interrupt ? cfg_.interrupt->load() : 0;
    if (irq >= 1 && !interrupted_.exchange(true)) stop_sending();
    if (ms >= 0 && now >= ms + cfg_.duration_s) stop_sending();
    // A server failing most requests is not worth measuring for the whole duration.
    const int64_t done = counters_.done.load(), failed = counters_.failed.load();
    if (cfg_.abort_failed_ratio > 0 && done >= 20 &&
        static_cast<double>(failed) > cfg_.abort_failed_ratio * static_cast<double>(done) &&
        !aborted_.exchange(true))
      stop_sending();
    // stop_s_ is written just after the stop flag; until then the grace period has not started.
    const double stopped_at = stop_s_.load();
    if (!sending() && ((stopped_at >= 0 && now >= stopped_at + cfg_.grace_s) || irq >= 2)) cancel_ = true;
  }
  for (auto& t : threads) t.join();
  ReplayOutput out;
  out.records = std::move(records_);
  out.measure_start_s = measure_start_s_;
  out.stop_s = stop_s_.load();
  out.interrupted = interrupted_.load();
  out.aborted_for_failures = aborted_.load();
  return out;
}

}  // namespace ds::bench
