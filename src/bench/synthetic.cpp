#include "bench/synthetic.h"

#include <algorithm>
#include <random>
#include <string>

#include "bench/hash.h"
#include "core/error.h"

namespace ds::bench {

namespace {

// A run of tokens with one identity: equal uid and length means equal content.
struct Segment {
  uint64_t uid;
  int64_t length;
};

// Block ids as a pure function of the prompt prefix: id_i = H(id_{i-1}, pieces of block i), so
// two prompts that agree on their first i blocks get the same first i ids and differ after.
std::vector<uint64_t> block_ids(const std::vector<Segment>& segs, int64_t block_size) {
  std::vector<uint64_t> ids;
  uint64_t prev = 0x5EED;
  uint64_t piece_hash = 0;
  int64_t filled = 0;
  for (const auto& s : segs) {
    int64_t off = 0;
    while (off < s.length) {
      int64_t take = std::min(s.length - off, block_size - filled);
      piece_hash = mix64(piece_hash, mix64(s.uid, mix64(static_cast<uint64_t>(off),
                                                       static_cast<uint64_t>(take))));
      filled += take;
      off += take;
      if (filled == block_size) {
        prev = mix64(prev, piece_hash);
        ids.push_back(prev);
        piece_hash = 0;
        filled = 0;
      }
    }
  }
  if (filled > 0) ids.push_back(mix64(prev, piece_hash));
  return ids;
}

int64_t total(const std::vector<Segment>& segs) {
  int64_t n = 0;
  for (auto& s : segs) n += s.length;
  return n;
}

class Generator {
 public:
  explicit Generator(const SyntheticConfig& c) : c_(c), rng_(c.seed) {}

  Workload run() {
    Workload w;
    w.source = "synthetic:agentic-code";
    w.format = w.source;
    w.block_size = c_.block_size;
    const Segment system{mix64(c_.seed, 0x5157E3), c_.system_tokens};
    for (int i = 0; i < c_.sessions; ++i) {
      const int repo = static_cast<int>(uniform_int(0, c_.repos - 1));
      const Segment repo_seg{mix64(c_.seed, 0x4E90000ull + static_cast<uint64_t>(repo)),
                             c_.repo_tokens};
      const uint64_t uid = mix64(c_.seed, 0x5E55100000ull + static_cast<uint64_t>(i));
      Session s = conversation(uid, {system, repo_seg}, c_.session_tokens,
                               static_cast<int>(uniform_int(c_.turns_min, c_.turns_max)), true);
      s.id = "syn" + std::to_string(i) + "-repo" + std::to_string(repo);
      w.sessions.push_back(std::move(s));
    }
    return w;
  }

 private:
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng_);
  }
  // Around `mean`, never below 1: the spread of real turn sizes without a heavy tail that
  // would swamp a small model.
  int64_t around(int64_t mean) {
    if (mean <= 1) return 1;
    return std::max<int64_t>(1, uniform_int(mean / 2, mean + mean / 2));
  }
  double think() {
    if (c_.think_s <= 0) return 0;
    return std::exponential_distribution<double>(1.0 / c_.think_s)(rng_);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  Session conversation(uint64_t uid, std::vector<Segment> prefix, int64_t context_tokens,
                       int turns, bool may_fork) {
    Session s;
    std::vector<Segment> segs = std::move(prefix);
    segs.push_back({mix64(uid, 1), context_tokens});
    for (int t = 0; t < turns; ++t) {
      segs.push_back({mix64(uid, 100 + 2 * static_cast<uint64_t>(t)), around(c_.turn_input_tokens)});
      TraceRequest r;
      r.input_tokens = total(segs);
      r.output_tokens = around(c_.output_tokens);
      r.hash_ids = block_ids(segs, c_.block_size);
      r.delay_s = t == 0 ? 0.0 : think();
      r.stop_reason = t + 1 < turns ? "tool_use" : "end_turn";
      segs.push_back({mix64(uid, 101 + 2 * static_cast<uint64_t>(t)), r.output_tokens});
      s.requests.push_back(std::move(r));
      // A subagent starts from the shared layers plus its own task, not the parent's history:
      // a fresh-context helper, as coding agents spawn them.
      if (may_fork && t + 1 < turns && chance(c_.subagent_probability)) {
        Spawn sp;
        sp.after_request = t;
        sp.background = chance(c_.background_probability);
        const uint64_t child_uid = mix64(uid, 0xC41D0000ull + static_cast<uint64_t>(t));
        sp.child = conversation(child_uid, {segs[0], segs[1]}, c_.session_tokens,
                                static_cast<int>(uniform_int(1, c_.subagent_turns_max)), false);
        sp.child.id = "sub" + std::to_string(t);
        s.spawns.push_back(std::move(sp));
      }
    }
    return s;
  }

  const SyntheticConfig& c_;
  std::mt19937_64 rng_;
};

}  // namespace

Workload generate_agentic_code(const SyntheticConfig& cfg) {
  DS_CHECK(cfg.sessions > 0, "synthetic: sessions must be positive");
  DS_CHECK(cfg.block_size > 0, "synthetic: block size must be positive");
  DS_CHECK(cfg.repos > 0, "synthetic: repos must be positive");
  DS_CHECK(cfg.turns_min >= 1 && cfg.turns_max >= cfg.turns_min,
           "synthetic: need 1 <= turns-min <= turns-max");
  DS_CHECK(cfg.system_tokens >= 0 && cfg.repo_tokens >= 0 && cfg.session_tokens >= 0,
           "synthetic: token sizes must not be negative");
  return Generator(cfg).run();
}

Workload generate_fixed(const SyntheticConfig& cfg) {
  DS_CHECK(cfg.sessions > 0, "synthetic: sessions must be positive");
  DS_CHECK(cfg.block_size > 0, "synthetic: block size must be positive");
  DS_CHECK(cfg.fixed_input_tokens >= 1 && cfg.fixed_output_tokens >= 1,
           "synthetic fixed: --fixed-input-tokens and --fixed-output-tokens must be at least 1");
  Workload w;
  w.source = "synthetic:fixed";
  w.format = w.source;
  w.block_size = cfg.block_size;
  for (int i = 0; i < cfg.sessions; ++i) {
    Session s;
    s.id = "fixed" + std::to_string(i);
    TraceRequest r;
    r.input_tokens = cfg.fixed_input_tokens;
    r.output_tokens = cfg.fixed_output_tokens;
    // The session's own segment: no block id is shared with another session.
    r.hash_ids = block_ids({{mix64(cfg.seed, 0xF1ED000000ull + uint64_t(i)), cfg.fixed_input_tokens}}, cfg.block_size);
    r.stop_reason = "end_turn";
    s.requests.push_back(std::move(r));
    w.sessions.push_back(std::move(s));
  }
  return w;
}

}  // namespace ds::bench
