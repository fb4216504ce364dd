// The load model without HTTP: a fake sender answers at once, and the tests read what the
// lanes sent and in which order.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "bench/lanes.h"

namespace ds::bench {
namespace {

struct Sent {
  std::vector<int32_t> prompt;
  int64_t max_tokens;
};

class FakeSender : public RequestSender {
 public:
  FakeSender(std::mutex& mu, std::vector<Sent>& log, Clock::time_point origin, bool overflow_long)
      : mu_(mu), log_(log), origin_(origin), overflow_long_(overflow_long) {}
  StreamResult send(const std::vector<int32_t>& prompt, int64_t max_tokens,
                    const std::atomic<bool>&) override {
    StreamResult r;
    r.status = 200;
    r.send_s = std::chrono::duration<double>(Clock::now() - origin_).count();
    {
      std::lock_guard lock(mu_);
      log_.push_back({prompt, max_tokens});
    }
    if (overflow_long_ && prompt.size() > 250) {
      r.status = 400;
      r.error = "HTTP 400: maximum context length exceeded";
      r.context_overflow = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      r.chunk_s = {r.send_s + 0.0005};
      r.completion_tokens = max_tokens;
    }
    r.end_s = std::chrono::duration<double>(Clock::now() - origin_).count();
    return r;
  }

 private:
  std::mutex& mu_;
  std::vector<Sent>& log_;
  Clock::time_point origin_;
  bool overflow_long_;
};

Session session(const std::string& id, int turns, int64_t base) {
  Session s;
  s.id = id;
  for (int t = 0; t < turns; ++t) {
    TraceRequest r;
    r.input_tokens = base + 100 * t;
    r.output_tokens = 2 + t;
    for (int64_t b = 0; b * 16 < r.input_tokens; ++b) r.hash_ids.push_back(static_cast<uint64_t>(b) + 1000 * base);
    s.requests.push_back(r);
  }
  return s;
}

struct Harness {
  Workload w;
  std::mutex mu;
  std::vector<Sent> log;
  bool overflow_long = false;

  ReplayOutput run(const LoadConfig& cfg) {
    const auto origin = Clock::now();
    PromptTokens pt(1, w.block_size, TokenRange::for_vocab(5000), shared_hash_ids(w));
    Replay replay(w, pt, cfg, [&] { return std::make_unique<FakeSender>(mu, log, origin, overflow_long); },
                  origin);
    return replay.run();
  }
};

TEST(Lanes, RecycleSessionsAndStartMidTrace) {
  Harness h;
  h.w.block_size = 16;
  for (int i = 0; i < 3; ++i) h.w.sessions.push_back(session("s" + std::to_string(i), 4, 20 + i));
  LoadConfig cfg;
  cfg.concurrency = 2;
  cfg.warmup_requests_per_lane = 0;
  cfg.max_requests = 30;
  cfg.start_min_ratio = cfg.start_max_ratio = 0.5;
  const ReplayOutput out = h.run(cfg);
  ASSERT_EQ(out.records.size(), 30u);
  std::map<int, std::set<uint64_t>> plays_per_lane;
  std::map<uint64_t, std::vector<int>> turns_per_play;
  for (const auto& r : out.records) {
    plays_per_lane[r.lane].insert(r.play);
    turns_per_play[r.play].push_back(r.turn);
    EXPECT_FALSE(r.warmup);
  }
  ASSERT_EQ(plays_per_lane.size(), 2u);
  for (auto& [lane, plays] : plays_per_lane) {
    EXPECT_GE(plays.size(), 3u) << "lane " << lane;
  }
  // The lanes' first sessions start half-way (turn 2 of 4); recycled ones from turn 0.
  EXPECT_EQ(turns_per_play[0].front(), 2);
  EXPECT_EQ(turns_per_play[1].front(), 2);
  for (auto& [play, turns] : turns_per_play)
    if (play >= 2 && turns.size() == 4) {
      EXPECT_EQ(turns, (std::vector<int>{0, 1, 2, 3}));
    }
  // More plays than sessions: traces were replayed again.
  EXPECT_GT(turns_per_play.size(), h.w.sessions.size());
}

TEST(Lanes, WarmupPrimesTheStartPoint) {
  Harness h;
  h.w.block_size = 16;
  h.w.sessions.push_back(session("only", 5, 30));
  LoadConfig cfg;
  cfg.concurrency = 1;
  cfg.warmup_requests_per_lane = 2;
  cfg.max_requests = 3;
  cfg.start_min_ratio = cfg.start_max_ratio = 0.8;  // start point: turn 4
  const ReplayOutput out = h.run(cfg);
  ASSERT_EQ(out.records.size(), 5u);
  EXPECT_TRUE(out.records[0].warmup);
  EXPECT_EQ(out.records[0].turn, 2);
  EXPECT_TRUE(out.records[1].warmup);
  EXPECT_FALSE(out.records[2].warmup);
  EXPECT_EQ(out.records[2].turn, 4);
  // The measured turn's prompt extends the warm-up turn's: the cache model sees the prefix.
  EXPECT_GT(out.records[2].theoretical_cached_tokens, 0);
  EXPECT_GE(out.measure_start_s, out.records[1].result.send_s);
}

TEST(Lanes, SubagentsJoinBeforeTheParentContinues) {
  Harness h;
  h.w.block_size = 16;
  Session parent = session("p", 3, 40);
  Spawn sp;
  sp.after_request = 0;
  sp.child = session("p/child", 2, 50);
  parent.spawns.push_back(sp);
  h.w.sessions.push_back(parent);
  LoadConfig cfg;
  cfg.concurrency = 1;
  cfg.warmup_requests_per_lane = 0;
  cfg.max_requests = 5;
  cfg.start_min_ratio = cfg.start_max_ratio = 0;
  const ReplayOutput out = h.run(cfg);
  ASSERT_EQ(out.records.size(), 5u);
  std::vector<std::string> order;
  for (auto& r : out.records) order.push_back(r.session + "#" + std::to_string(r.turn));
  EXPECT_EQ(order, (std::vector<std::string>{"p#0", "p/child#0", "p/child#1", "p#1", "p#2"}));
  EXPECT_EQ(out.records[1].depth, 1);
  EXPECT_EQ(out.records[1].play, out.records[0].play);  // one tree, one cache namespace
}

TEST(Lanes, ContextOverflowEndsTheSession) {
  Harness h;
  h.overflow_long = true;
  h.w.block_size = 16;
  h.w.sessions.push_back(session("grow", 5, 60));  // 60, 160, 260 (overflows), 360, 460
  LoadConfig cfg;
  cfg.concurrency = 1;
  cfg.warmup_requests_per_lane = 0;
  cfg.max_requests = 6;
  cfg.start_min_ratio = cfg.start_max_ratio = 0;
  const ReplayOutput out = h.run(cfg);
  ASSERT_EQ(out.records.size(), 6u);
  // Each play stops at its first overflow and the lane recycles from turn 0.
  std::vector<int> turns;
  for (auto& r : out.records) turns.push_back(r.turn);
  EXPECT_EQ(turns, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(out.records[2].result.context_overflow);
  // Prompts were exactly as long as recorded.
  for (size_t i = 0; i < h.log.size(); ++i)
    EXPECT_EQ(static_cast<int64_t>(h.log[i].prompt.size()), out.records[i].input_tokens);
}

// No wall-clock upper bounds here (a loaded 2-core machine can stall any thread for seconds):
// what a run must do is asserted through the order of its recorded times and lower bounds on
// them. A run that failed to stop would hang, which ctest's per-test timeout turns into a failure.
TEST(Lanes, DurationEndsTheRunEvenDuringThinkTime) {
  Harness h;
  h.w.block_size = 16;
  Session s = session("slow", 3, 20);
  for (auto& r : s.requests) r.delay_s = 3600;  // an hour of think time, and no cap below it
  h.w.sessions.push_back(s);
  LoadConfig cfg;
  cfg.concurrency = 2;
  cfg.warmup_requests_per_lane = 0;
  cfg.start_min_ratio = cfg.start_max_ratio = 0;  // both lanes open at turn 0, sent at once
  cfg.duration_s = 0.5;
  cfg.idle_gap_cap_s = 3600;
  const ReplayOutput out = h.run(cfg);
  // Each lane sent turn 0 and was thinking about turn 1 when the duration ran out: the stop woke
  // it instead of letting it sleep out the hour, and nothing was sent after the stop. (A lane
  // whose thread started only after the stop sends nothing, so 1 record is also possible.)
  ASSERT_GE(out.records.size(), 1u);
  ASSERT_LE(out.records.size(), 2u);
  ASSERT_GE(out.measure_start_s, 0);
  EXPECT_GE(out.stop_s, out.measure_start_s + cfg.duration_s);
  for (const auto& r : out.records) {
    EXPECT_EQ(r.turn, 0);
    EXPECT_GE(r.result.send_s, out.measure_start_s);
    EXPECT_LE(r.result.send_s, out.stop_s);
  }
}

TEST(Lanes, ThinkTimeIsCapped) {
  Harness h;
  h.w.block_size = 16;
  Session s = session("slow", 3, 20);
  for (auto& r : s.requests) r.delay_s = 3600;  // an hour of think time, capped to 50 ms
  h.w.sessions.push_back(s);
  LoadConfig cfg;
  cfg.concurrency = 2;
  cfg.warmup_requests_per_lane = 0;
  cfg.start_min_ratio = cfg.start_max_ratio = 0;
  cfg.max_requests = 8;  // ends the run; the default 60 s duration is only a backstop: without
                         // the cap it would stop the run after each lane's first request
  cfg.idle_gap_cap_s = 0.05;
  const ReplayOutput out = h.run(cfg);
  ASSERT_EQ(out.records.size(), 8u);
  // Per lane, in send order: a later turn of the same play waited at least the cap after the
  // previous turn ended (the gap was replayed, capped, not skipped); a new play starts at once.
  std::map<int, std::vector<const RequestRecord*>> by_lane;
  for (const auto& r : out.records) by_lane[r.lane].push_back(&r);
  int waited = 0;
  for (auto& [lane, recs] : by_lane) {
    std::sort(recs.begin(), recs.end(), [](auto* a, auto* b) { return a->result.send_s < b->result.send_s; });
    for (size_t i = 1; i < recs.size(); ++i) {
      EXPECT_GE(recs[i]->result.send_s, recs[i - 1]->result.end_s) << "lane " << lane;
      if (recs[i]->play == recs[i - 1]->play) {
        EXPECT_EQ(recs[i]->turn, recs[i - 1]->turn + 1) << "lane " << lane;
        EXPECT_GE(recs[i]->result.send_s - recs[i - 1]->result.end_s, cfg.idle_gap_cap_s - 1e-3) << "lane " << lane;
        ++waited;
      }
    }
  }
  EXPECT_GE(waited, 4);  // 8 requests over 2 lanes of 3-turn plays: at least 4 capped gaps
}

}  // namespace
}  // namespace ds::bench
