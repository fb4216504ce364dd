// The token mask against a brute-force reference (every token's bytes run through a copy of
// the state), along whole constrained walks; the mask cache; and the constraint's life cycle.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <random>

#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "grammar_test_util.h"

namespace ds::grammar {
namespace {

// A vocabulary with single bytes, JSON-ish fragments, multi-byte UTF-8, and empty (special) ids.
std::shared_ptr<TokenVocabulary> test_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* t : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "name", "\"name\"", ": ", ", ", "12", "0.",
                        "e+", "[\"", "\"]", "}}", "abc", "\\n", "\\u00", "\xc3\xa9", "\xc3", "\xa9t", " \"", "\"a\":1}", "]}"})
    v.push_back(t);
  v.push_back("");  // a special token
  v.push_back("");
  return std::make_shared<TokenVocabulary>(std::move(v));
}

std::vector<uint64_t> brute_mask(const Grammar& g, const std::string& prefix, const TokenVocabulary& v) {
  std::vector<uint64_t> m(v.mask_words(), 0);
  for (int32_t t = 0; t < v.size(); ++t)
    if (!v.bytes(t).empty() && testing::viable_prefix(g, prefix + v.bytes(t))) m[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
  return m;
}

// cache_bytes: the default, and a bound so small that the learnt states are dropped on every
// call, so each step finds its state again by key.
class MaskWalks : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(CacheBytes, MaskWalks, ::testing::Values(size_t(64) << 20, size_t(1)));

TEST_P(MaskWalks, MaskEqualsBruteForceAlongRandomWalks) {
  const auto vocab = test_vocab();
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name"]})",
      R"({"type":"array","items":{"enum":["a","b\u00e9",null]},"maxItems":3})",
      R"({"type":"object"})",
  };
  std::mt19937 rng(3);
  for (const char* schema : schemas) {
    auto cg = std::make_shared<CompiledGrammar>(json_schema_grammar(nlohmann::ordered_json::parse(schema)), vocab,
                                                GetParam());
    for (int walk = 0; walk < 6; ++walk) {
      TokenConstraint c(cg);
      std::string text;
      for (int step = 0; step < 40; ++step) {
        const auto& mask = c.allowed();
        ASSERT_EQ(mask, brute_mask(cg->grammar(), text, *vocab)) << schema << " after " << text;
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->size(); ++t)
          if ((mask[size_t(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
        EXPECT_EQ(c.complete(), testing::matches(cg->grammar(), text));
        if (allowed.empty()) break;
        // Prefer longer tokens half the time so the walk gets somewhere.
        const int32_t pick = allowed[rng() % allowed.size()];
        ASSERT_TRUE(c.accept(pick));
        text += vocab->bytes(pick);
        if (c.complete() && rng() % 4 == 0) break;
      }
    }
    if (GetParam() < 1024) {
      EXPECT_GT(cg->resets(), 0);
    } else {
      EXPECT_GT(cg->cached_masks(), 0u);
      EXPECT_EQ(cg->resets(), 0);
    }
  }
}

TEST(TokenConstraint, RefusesTokensOutsideTheMaskAndKeepsItsState) {
  auto cg = std::make_shared<CompiledGrammar>(json_schema_grammar(nlohmann::ordered_json::parse(R"({"const":"hi"})")), test_vocab());
  TokenConstraint c(cg);
  EXPECT_FALSE(c.accept('x'));
  EXPECT_FALSE(c.accept(-1));
  EXPECT_FALSE(c.accept(1 << 20));
  EXPECT_FALSE(c.accept(int32_t(test_vocab()->size() - 1))) << "a special token has no bytes";
  EXPECT_TRUE(c.accept('"'));
  EXPECT_TRUE(c.accept('h'));
  EXPECT_FALSE(c.complete());
  EXPECT_TRUE(c.accept('i'));
  EXPECT_TRUE(c.accept('"'));
  EXPECT_TRUE(c.complete());
  EXPECT_FALSE(c.can_continue()) << "only an end token may follow";
}

TEST(TokenConstraint, SecondRequestHitsTheCache) {
  auto cg = std::make_shared<CompiledGrammar>(json_object_grammar(), test_vocab());
  auto run = [&](TokenConstraint& c) {
    for (const char* t : {"{\"", "name", "\":", "1", "2", "}"}) {
      std::string s = t;
      int32_t id = -1;
      for (int32_t i = 0; i < cg->vocabulary().size(); ++i)
        if (cg->vocabulary().bytes(i) == s) id = i;
      ASSERT_GE(id, 0);
      ASSERT_TRUE(c.allows(id)) << t;  // as the engine does: the mask, then the sampled token
      ASSERT_TRUE(c.accept(id)) << t;
    }
    EXPECT_TRUE(c.complete());
  };
  TokenConstraint a(cg), b(cg);
  run(a);
  // Inside the integer "12" the matcher returns to the same state (tail calls do not deepen
  // the stack), so even the first request reuses one of its own masks.
  EXPECT_GE(a.masks_cached(), 1);
  run(b);
  EXPECT_EQ(b.masks_computed(), 0);
  EXPECT_EQ(b.masks_cached(), a.masks_computed() + a.masks_cached());
}

}  // namespace
}  // namespace ds::grammar
