// Synthetic acceptance (its mean, and the engine accepting whatever the target says), golden
// acceptance-length curves, and the start-up errors: one clear line for each bad setting (the
// speculation flags as serve and generate parse them included).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli/spec_flags.h"
#include "core/error.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "spec_decode/golden_curve.h"
#include "spec_decode/synthetic_acceptance.h"
#include "spec_test_util.h"
#include "../support/remove_at_exit.h"

namespace ds::test {
namespace {

TEST(SyntheticAcceptance, MeanLengthWithinTwoPercentOfAL) {
  for (int k : {3, 7, 16}) {
    for (double al : {1.0, 3.0, 3.84, double(k + 1)}) {
      if (al > k + 1) continue;
      SyntheticAcceptance s(al, k);
      std::mt19937_64 rng(uint64_t(k * 100 + al * 10));
      std::uniform_real_distribution<double> u(0, 1);
      const std::function<double()> draw = [&] { return u(rng); };
      const int rounds = 20000;
      double total = 0;
      for (int r = 0; r < rounds; ++r) total += 1 + s.draw(k, draw);
      EXPECT_NEAR(total / rounds, al, 0.02 * al) << "K " << k << " AL " << al << " alpha " << s.alpha();
    }
  }
  EXPECT_EQ(SyntheticAcceptance(1.0, 7).alpha(), 0.0);
  EXPECT_EQ(SyntheticAcceptance(8.0, 7).alpha(), 1.0);
}

TEST(SyntheticAcceptance, TheEngineAcceptsWhateverTheTargetSays) {
  // A draft that never agrees with the target, yet at AL = K + 1 every round accepts all K:
  // the tokens are the draft's, so they differ from the target's greedy ones.
  const std::string target = preset_model("tiny-hybrid", 512, 3), draft = preset_model("tiny-llama", 512, 9);
  EngineConfig c;
  c.max_num_seqs = 2;
  c.max_model_len = 512;
  c.num_kv_blocks = 16;
  c.threads = 2;
  c.prefix.enabled = false;
  std::vector<int32_t> prompt;
  for (int t = 0; t < 30; ++t) prompt.push_back(int32_t(t * 7 % 500));
  Engine plain(Model::load(target, 2), c);
  const auto want = testing::collect(*plain.submit(testing::greedy_request(prompt, 200))).tokens;
  for (double al : {5.0, 3.0}) {
    EngineConfig sc = c;
    sc.spec.draft_model = draft;
    sc.spec.num_speculative_tokens = 4;
    sc.spec.acceptance_length = al;
    sc.spec.acceptance_source = "test";
    Engine spec(Model::load(target, 2), sc);
    auto s = spec.submit(testing::greedy_request(prompt, 200));
    const auto got = testing::collect(*s).tokens;
    EXPECT_EQ(got.size(), want.size());
    EXPECT_NE(got, want);
    const double seen = 1.0 + double(s->accepted_prediction_tokens()) / s->speculative_rounds();
    if (al == 5.0) {
      EXPECT_EQ(s->rejected_prediction_tokens(), 0);
      EXPECT_GT(seen, 4.9);  // the last round is cut short by max_tokens
    } else {
      EXPECT_NEAR(seen, al, 0.5) << "about 60 rounds";
    }
  }
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("ds-spec-" + std::to_string(::getpid()) + "-" + name)).string();
  std::ofstream(path) << text;
  return ds::test::remove_at_exit(path);
}

TEST(GoldenCurve, ReadsThePublishedSchemaAndRoundTrips) {
  const std::string ref = std::string(DS_SOURCE_DIR) + "/recipes/golden/golden_al_kimik3_dspark_block.yaml";  // the published curve
  if (std::filesystem::exists(ref)) {
    const GoldenCurve c = load_golden_curve(ref);
    EXPECT_EQ(c.curve_key, "thinking_on");
    EXPECT_DOUBLE_EQ(c.al.at(7), 3.84);
    EXPECT_DOUBLE_EQ(c.al.at(3), 3.00);
    EXPECT_EQ(c.rejection_sample_method, "block");
  }
  GoldenCurve c;
  c.model = "t";
  c.draft_model = "d";
  c.draft_sample_method = "greedy";
  c.rejection_sample_method = "greedy";
  c.al = {{1, 1.5}, {2, 1.9}, {8, 2.75}};
  const std::string path = write_file("curve.yaml", "");
  save_golden_curve(c, path);
  const GoldenCurve back = load_golden_curve(path);
  EXPECT_EQ(back.al, c.al);
  EXPECT_EQ(back.curve_key, "acceptance_length");
  EXPECT_EQ(back.model, "t");
}

// Engine start-up with these settings fails with a message containing `what`.
void expect_start_error(const SpecOptions& spec, const std::string& what) {
  EngineConfig c;
  c.max_num_seqs = 2;
  c.max_model_len = 256;
  c.num_kv_blocks = 8;
  c.threads = 1;
  c.prefix.enabled = false;
  c.spec = spec;
  try {
    Engine e(Model::load(preset_model("tiny-hybrid", 512, 3), 1), c);
    ADD_FAILURE() << "started with bad settings; expected: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(SpecStartup, BadSettingsFailWithOneClearLine) {
  const std::string draft = preset_model("tiny-hybrid", 512, 3, DType::BF16);
  auto s = [&](int k) {
    SpecOptions o;
    o.draft_model = draft;
    o.num_speculative_tokens = k;
    return o;
  };
  SpecOptions o = s(7);
  o.acceptance_length = 0.5;
  expect_start_error(o, "acceptance length 0.500000 is outside [1, 8]");
  o.acceptance_length = 8.5;
  expect_start_error(o, "is outside [1, 8]");
  expect_start_error(s(0), "--num-speculative-tokens 0 is outside [1, 16]");
  expect_start_error(s(17), "--num-speculative-tokens 17 is outside [1, 16]");
  o = s(3);
  o.draft_model = preset_model("tiny-hybrid", 256, 3);
  expect_start_error(o, "--draft-model has a vocabulary of 256 tokens, the target 512");
  o = s(3);
  o.golden_al_file = "/nonexistent/golden.yaml";
  expect_start_error(o, "golden AL file '/nonexistent/golden.yaml' does not exist");
  o.golden_al_file = write_file("bad.yaml", "thinking_on: [1, 2\n");
  expect_start_error(o, "not valid YAML");
  o.golden_al_file = write_file("nocurve.yaml", "model: x\n");
  expect_start_error(o, "no curve");
  o.golden_al_file = write_file("nok.yaml", "thinking_on:\n  1: 1.8\n  2: 2.5\n");
  expect_start_error(o, "has no AL for --num-speculative-tokens 3 (it has 1, 2)");
  o.golden_al_file = write_file("badal.yaml", "thinking_on:\n  3: 5.5\n");
  expect_start_error(o, ":2: AL 5.5 for 3 draft tokens is outside [1, 4]");
  o = SpecOptions{};
  o.state_rollback = "replay";
  expect_start_error(o, "--state-rollback replay needs --draft-model");
  o = SpecOptions{};
  o.window = 4;
  expect_start_error(o, "--spec-window needs --draft-model");
  o = s(3);
  o.window = -1;
  expect_start_error(o, "--spec-window -1 is negative");
  o.state_rollback = "sideways";
  expect_start_error(o, "--state-rollback 'sideways' is not one of lanes, replay");
  o = s(3);
  o.acceptance_length = 2;
  o.golden_al_file = write_file("ok.yaml", "thinking_on:\n  3: 3.0\n");
  expect_start_error(o, "not both");
  EXPECT_THROW(parse_spec_method("fast"), Error);
  EXPECT_THROW(parse_draft_sample("maybe"), Error);
}

TEST(SpecStartup, SuffixAndAutoSettingsFailWithOneClearLine) {
  SpecOptions o;
  o.source = DraftSource::Suffix;
  o.num_speculative_tokens = 4;
  o.draft_model = preset_model("tiny-hybrid", 512, 3, DType::BF16);
  expect_start_error(o, "--spec-method suffix drafts from the session's tokens: it takes no --draft-model");
  o.draft_model.clear();
  o.acceptance_length = 2;
  expect_start_error(o, "--spec-method suffix measures real acceptance");
  o.acceptance_length = 0;
  o.suffix.max_depth = 1;
  expect_start_error(o, "--suffix-max-depth 1 is outside [2, 256]");
  o.suffix.max_depth = 24;
  o.suffix.cache_tokens = -1;
  expect_start_error(o, "--suffix-cache-tokens -1 is outside [0, 2^30]");
  SpecOptions a;
  a.auto_k = true;
  expect_start_error(a, "--num-speculative-tokens needs --draft-model or --spec-method suffix");
  a.draft_model = preset_model("tiny-hybrid", 512, 3, DType::BF16);
  a.acceptance_length = 2;
  expect_start_error(a, "--num-speculative-tokens auto chooses K each step: synthetic acceptance needs a fixed K");
  // auto's bound on a round when none is given: 8 with a draft model, 16 with suffix drafting.
  a.acceptance_length = 0;
  resolve_spec_options(&a);
  EXPECT_EQ(a.num_speculative_tokens, kAutoDraftModelTokens);
  SpecOptions b;
  b.source = DraftSource::Suffix;
  b.auto_k = true;
  resolve_spec_options(&b);
  EXPECT_EQ(b.num_speculative_tokens, kMaxSpeculativeTokens);
}

TEST(SpecStartup, FlagsParseCountsAutoAndTheVerifier) {
  cli::SpecFlags f;
  f.k = "auto";
  f.method = "suffix";
  SpecOptions o = cli::spec_options_of(f);
  EXPECT_TRUE(o.auto_k);
  EXPECT_EQ(o.source, DraftSource::Suffix);
  EXPECT_EQ(o.method, SpecMethod::Block) << "suffix verifies by block unless --spec-verify says otherwise";
  f.verify = "greedy";
  EXPECT_EQ(cli::spec_options_of(f).method, SpecMethod::Greedy);
  auto error_of = [](const cli::SpecFlags& g) {
    try {
      cli::spec_options_of(g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  f.verify = "maybe";
  EXPECT_EQ(error_of(f), "--spec-verify 'maybe' is not one of greedy, probabilistic, block");
  f = cli::SpecFlags{};
  f.k = "7x";
  EXPECT_EQ(error_of(f), "--num-speculative-tokens '7x' is neither a count nor auto");
  f.k = "3";
  EXPECT_EQ(cli::spec_options_of(f).num_speculative_tokens, 3);
  f.method = "fast";
  EXPECT_EQ(error_of(f), "--spec-method 'fast' is not one of greedy, probabilistic, block, suffix");
  f.method = "block";
  f.verify = "greedy";
  EXPECT_NE(error_of(f).find("--spec-verify goes with --spec-method suffix"), std::string::npos);
  // No K: the flag that needs it is named, not a value of 0.
  f = cli::SpecFlags{};
  f.draft_model = "d";
  EXPECT_EQ(error_of(f), "--draft-model needs --num-speculative-tokens: draft tokens per round, a count in [1, 16], or auto");
  f = cli::SpecFlags{};
  f.method = "suffix";
  EXPECT_EQ(error_of(f), "--spec-method suffix needs --num-speculative-tokens: draft tokens per round, a count in [1, 16], or auto");
  f.k = "0";  // given, and out of range: that is the range's error, at start-up
  SpecOptions zero = cli::spec_options_of(f);
  expect_start_error(zero, "--num-speculative-tokens 0 is outside [1, 16]");
}

// --draft-method names what drafts beside the older flags; without it resolve_spec_options names
// it from them, once, so the engine never has to find out.
TEST(SpecStartup, DraftMethodIsNamedByTheFlagOrFromTheOthers) {
  auto error_of = [](const cli::SpecFlags& g) {
    try {
      SpecOptions o = cli::spec_options_of(g);
      resolve_spec_options(&o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  cli::SpecFlags f;
  f.k = "4";
  f.draft_method = "suffix";
  f.method = "greedy";
  SpecOptions o = cli::spec_options_of(f);
  EXPECT_EQ(o.source, DraftSource::Suffix);
  EXPECT_EQ(o.method, SpecMethod::Greedy) << "with --draft-method suffix, --spec-method is the verifier";
  resolve_spec_options(&o);
  EXPECT_EQ(o.draft_method, "suffix");
  EXPECT_STREQ(drafter_name(o), "suffix");
  const SpecOptions again = o;
  resolve_spec_options(&o);
  EXPECT_EQ(o.draft_method, again.draft_method) << "resolving twice changes nothing";

  f = cli::SpecFlags{};
  f.k = "4";
  f.method = "suffix";
  o = cli::spec_options_of(f);
  resolve_spec_options(&o);
  EXPECT_EQ(o.draft_method, "suffix") << "--spec-method suffix names the method";

  f = cli::SpecFlags{};
  f.k = "3";
  f.draft_model = preset_model("tiny-hybrid", 512, 3, DType::BF16);
  o = cli::spec_options_of(f);
  resolve_spec_options(&o);
  EXPECT_EQ(o.draft_method, "draft_model") << "a draft folder that is not a parallel drafter's";
  EXPECT_STREQ(drafter_name(o), "draft_model");

  f.draft_method = "bogus";
  EXPECT_EQ(error_of(f), "--draft-method 'bogus' is not one of draft_model, suffix, parallel");
  f = cli::SpecFlags{};
  f.k = "3";
  f.draft_method = "parallel";
  EXPECT_EQ(error_of(f), "--draft-method parallel needs --draft-model (the drafter's folder)");
  f.draft_model = "d";
  f.method = "suffix";
  EXPECT_NE(error_of(f).find("does not go with --spec-method suffix"), std::string::npos) << error_of(f);
}

TEST(SpecStartup, GoldenFileSetsTheAcceptanceLengthForK) {
  SpecOptions o;
  o.draft_model = "d";
  o.num_speculative_tokens = 3;
  o.golden_al_file = write_file("good.yaml", "model: m\nthinking_on:\n  1: 1.85\n  3: 3.00\n  7: 3.84\n");
  resolve_spec_options(&o);
  EXPECT_DOUBLE_EQ(o.acceptance_length, 3.0);
  EXPECT_EQ(o.acceptance_source, o.golden_al_file);
  EXPECT_TRUE(o.synthetic());
}

}  // namespace
}  // namespace ds::test
