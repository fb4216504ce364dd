// The suffix trie against a brute-force reference: occurrence counts of every pattern, and
// proposals (longest matched suffix with a continuation, the most frequent next token with ties
// to the most recent, cumulative chances, the min-prob stop and the depth bound), on random and
// repetitive streams; erasing a stream takes back exactly what inserting it added; the global
// cache of outputs stays within its token budget and its node bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "spec_decode/suffix_proposer.h"
#include "spec_decode/suffix_trie.h"

namespace ds {
namespace {

using Stream = std::vector<int32_t>;

// Every stream held, in insertion order; positions are numbered across streams in that order
// (what the trie's recency stamps follow).
struct Brute {
  std::vector<Stream> streams;
  int depth;

  int64_t count(const Stream& p) const {
    if (p.empty() || int(p.size()) > depth) return 0;
    int64_t n = 0;
    for (const Stream& s : streams)
      for (size_t i = 0; i + p.size() <= s.size(); ++i) n += std::equal(p.begin(), p.end(), s.begin() + long(i));
    return n;
  }
  // Occurrences of p followed by each next token, and the latest global end position of p + t.
  void next(const Stream& p, std::map<int32_t, std::pair<int64_t, int64_t>>* out) const {
    out->clear();
    if (int(p.size()) + 1 > depth) return;
    int64_t base = 0;
    for (const Stream& s : streams) {
      for (size_t i = 0; i + p.size() < s.size(); ++i) {
        if (!std::equal(p.begin(), p.end(), s.begin() + long(i))) continue;
        auto& e = (*out)[s[i + p.size()]];
        e.first += 1;
        e.second = std::max(e.second, base + int64_t(i + p.size()));
      }
      base += int64_t(s.size());
    }
  }
  SuffixTrie::Proposal propose(const Stream& ctx, int max_match, int max_tokens, double factor, double min_prob) const {
    SuffixTrie::Proposal r;
    std::map<int32_t, std::pair<int64_t, int64_t>> nx;
    for (int m = std::min({int(ctx.size()), max_match, depth}); m >= 1; --m) {
      Stream p(ctx.end() - m, ctx.end());
      next(p, &nx);
      if (nx.empty()) continue;
      r.match_length = m;
      const int limit = std::min(max_tokens, int(std::ceil(factor * m)));
      double prob = 1;
      while (int(r.tokens.size()) < limit) {
        next(p, &nx);
        if (nx.empty()) break;
        int64_t total = 0;
        auto best = nx.begin();
        for (auto it = nx.begin(); it != nx.end(); ++it) {
          total += it->second.first;
          if (it->second > best->second) best = it;  // count, then recency
        }
        prob *= double(best->second.first) / double(total);
        if (prob < min_prob) break;
        r.tokens.push_back(best->first);
        r.probs.push_back(float(prob));
        r.score += prob;
        p.push_back(best->first);
      }
      return r;
    }
    return r;
  }
};

Stream random_stream(std::mt19937& g, int n, int alphabet) {
  Stream s(static_cast<size_t>(n));
  for (auto& t : s) t = int32_t(g() % uint32_t(alphabet));
  return s;
}

// A stream that repeats chunks of itself, as code quoted and edited does.
Stream repetitive_stream(std::mt19937& g, int n, int alphabet) {
  Stream s = random_stream(g, 20, alphabet);
  while (int(s.size()) < n) {
    const size_t from = g() % s.size();
    const size_t len = 3 + g() % 15;
    for (size_t i = 0; i < len && from + i < s.size() && int(s.size()) < n; ++i) s.push_back(s[from + i]);
    if (g() % 3 == 0) s.push_back(int32_t(g() % uint32_t(alphabet)));
  }
  return s;
}

void expect_same(const SuffixTrie::Proposal& got, const SuffixTrie::Proposal& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.match_length, want.tokens.empty() ? got.match_length : want.match_length);
  ASSERT_EQ(got.probs.size(), want.probs.size());
  for (size_t i = 0; i < got.probs.size(); ++i) EXPECT_FLOAT_EQ(got.probs[i], want.probs[i]);
  EXPECT_NEAR(got.score, want.score, 1e-9);
}

TEST(SuffixTrie, CountsAndProposalsMatchBruteForce) {
  std::mt19937 g(7);
  for (int trial = 0; trial < 12; ++trial) {
    const int depth = 3 + trial % 6;
    const int alphabet = trial % 2 ? 3 : 6;
    SuffixTrie trie(depth);
    Brute brute{{}, depth};
    for (int n = 0; n < 3; ++n) {
      Stream s = trial % 3 == 0 ? random_stream(g, 120, alphabet) : repetitive_stream(g, 150, alphabet);
      trie.insert(s);
      brute.streams.push_back(s);
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    for (int q = 0; q < 200; ++q) {
      const Stream p = random_stream(g, 1 + int(g() % uint32_t(depth + 1)), alphabet);
      ASSERT_EQ(trie.count(p), brute.count(p));
    }
    for (int q = 0; q < 60; ++q) {
      const Stream ctx = q % 2 ? random_stream(g, 12, alphabet) : brute.streams[size_t(q % 3)];
      const int max_match = 1 + int(g() % uint32_t(depth));
      const int max_tokens = 1 + int(g() % 8);
      const double factor = q % 3 == 0 ? 0.5 : 2.0;
      const double min_prob = q % 4 == 0 ? 0.0 : 0.3;
      expect_same(trie.propose(ctx, max_match, max_tokens, factor, min_prob),
                  brute.propose(ctx, max_match, max_tokens, factor, min_prob));
    }
  }
}

TEST(SuffixTrie, CursorProposalEqualsWalkingTheStream) {
  // The per-request trie proposes from its cursor (the stream is the context): the same answer
  // as walking the stream's suffixes from the root, at every length of the stream.
  std::mt19937 g(11);
  for (int trial = 0; trial < 6; ++trial) {
    const int depth = 4 + trial * 3;
    SuffixTrie trie(depth);
    SuffixTrie::Cursor c;
    const Stream s = repetitive_stream(g, 300, 5);
    for (size_t i = 0; i < s.size(); ++i) {
      trie.append(c, s[i]);
      ASSERT_LE(int(c.active.size()), depth);
      const Stream ctx(s.begin(), s.begin() + long(i) + 1);
      const int max_match = std::max(depth / 2, depth - 4);
      expect_same(trie.propose(c, max_match, 6, 1.0, 0.1), trie.propose(ctx, max_match, 6, 1.0, 0.1));
    }
  }
}

TEST(SuffixTrie, EraseTakesBackExactlyAnInsert) {
  std::mt19937 g(3);
  const int depth = 6;
  SuffixTrie trie(depth);
  const Stream a = repetitive_stream(g, 200, 4), b = random_stream(g, 150, 4), c = repetitive_stream(g, 90, 4);
  trie.insert(a);
  trie.insert(b);
  trie.insert(c);
  trie.erase(b);
  Brute brute{{a, c}, depth};
  for (int q = 0; q < 300; ++q) {
    const Stream p = random_stream(g, 1 + int(g() % depth), 4);
    ASSERT_EQ(trie.count(p), brute.count(p));
  }
  trie.erase(a);
  trie.erase(c);
  EXPECT_EQ(trie.num_nodes(), 1u) << "only the root is left";
  // Freed nodes are reused: the same insert again needs no new ones.
  trie.insert(a);
  const size_t nodes = trie.num_nodes();
  EXPECT_LE(nodes, 1 + size_t(depth) * a.size());
}

TEST(SuffixProposer, GlobalCacheStaysWithinItsBudget) {
  // A long random stream of outputs (the worst case: almost no substring repeats) into a
  // 2000-token cache: tokens held never pass the budget, nodes never pass 1 + depth x tokens,
  // and what was evicted is gone from the trie.
  SuffixOptions o;
  o.max_depth = 16;
  o.cache_tokens = 2000;
  SuffixProposer p(o);
  std::mt19937 g(5);
  std::vector<Stream> outs;
  size_t peak_nodes = 0;
  for (int r = 0; r < 300; ++r) {
    const Stream out = random_stream(g, 50 + int(g() % 100), 1000);
    p.observe(uint64_t(r), out);
    p.retire(uint64_t(r), out);
    outs.push_back(out);
    ASSERT_LE(p.global_tokens(), o.cache_tokens);
    ASSERT_LE(p.global().num_nodes(), 1 + size_t(o.max_depth) * size_t(p.global_tokens()));
    peak_nodes = std::max(peak_nodes, p.global().num_nodes());
  }
  EXPECT_EQ(p.num_requests(), 0u) << "retired requests drop their own tries";
  EXPECT_EQ(p.global().count(Stream(outs.front().begin(), outs.front().begin() + 8)), 0) << "the oldest output was evicted";
  EXPECT_GE(p.global().count(Stream(outs.back().begin(), outs.back().begin() + 8)), 1);
  EXPECT_LE(peak_nodes, 1 + size_t(o.max_depth) * size_t(o.cache_tokens));
  // An output longer than the whole budget keeps its newest tokens.
  const Stream huge = random_stream(g, 5000, 1000);
  p.retire(999, huge);
  EXPECT_EQ(p.global_tokens(), o.cache_tokens);
  EXPECT_EQ(p.global().count(Stream(huge.end() - 8, huge.end())), 1);
}

TEST(SuffixProposer, ProposesFromTheRequestAndFromEarlierOutputs) {
  SuffixOptions o;
  o.max_depth = 24;
  SuffixProposer p(o);
  // The request's own prompt holds "1 2 3 4 5 6 7 8" and it has just written "1 2 3": the
  // continuation comes from its own trie.
  Stream req = {1, 2, 3, 4, 5, 6, 7, 8, 9, 40, 41, 1, 2, 3};
  p.observe(1, req);
  auto got = p.propose(1, req, 4);
  EXPECT_EQ(got.tokens, (Stream{4, 5, 6}));  // spec factor 1: as many tokens as matched
  // A second request that never saw "20 21 22 ..." gets it from a finished request's output.
  const Stream out = {20, 21, 22, 23, 24, 25, 26, 27};
  p.retire(7, out);
  Stream other = {50, 51, 20, 21, 22, 23};
  p.observe(2, other);
  got = p.propose(2, other, 8);
  EXPECT_EQ(got.tokens, (Stream{24, 25, 26, 27}));
  EXPECT_EQ(p.propose(2, Stream{99, 98}, 8).tokens, Stream{}) << "no match, no proposal";
}

}  // namespace
}  // namespace ds
