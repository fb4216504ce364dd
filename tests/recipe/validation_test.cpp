// Each rule `recipe plan` enforces, broken by one crafted recipe: the refusal is one line that
// names the point (or the file and line) and the rule. The valid base recipe plans cleanly.
#include <gtest/gtest.h>

#include "core/error.h"
#include "recipe/plan.h"
#include "recipe/recipe.h"
#include "recipe_test_util.h"

namespace ds::recipe {
namespace {

using testing::TempDir;

// A valid two-band recipe; each test replaces one piece of it.
std::string base(const std::string& bands_and_points, const std::string& extra_top = "") {
  return "name: t\nmodel: m\ndraft_model: d\nserved_name: s\ngolden_al: golden.yaml\n"
         "hardware:\n  available_mib: 100000\n  ranks: 8\n  devices_per_node: 8\n" +
         extra_top + "concurrency: [1, 4, 16]\n" + bands_and_points;
}
const char* kBands =
    "bands:\n"
    "  - name: spec\n    concurrency: 1-4\n    draft_tokens: 3\n    rollback: replay\n    max_num_seqs: 32\n"
    "  - name: plain\n    concurrency: 5-64\n    draft_tokens: 0\n    dcp: 8\n    dram_utilization: 0.5\n";

// Plans `text`; returns the error message, or "" when it plans.
std::string plan_error(const std::string& text, const char* golden = testing::kGolden) {
  TempDir d("validation");
  d.file("golden.yaml", golden);
  const std::string path = d.file("r.yaml", text);
  try {
    plan_recipe(load_recipe(path));
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    return msg;
  }
  return "";
}

void expect_refused(const std::string& text, const std::vector<std::string>& parts, const char* golden = testing::kGolden) {
  const std::string msg = plan_error(text, golden);
  ASSERT_FALSE(msg.empty()) << "the recipe was accepted";
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(RecipeValidation, BaseRecipePlans) { EXPECT_EQ(plan_error(base(kBands)), ""); }

TEST(RecipeValidation, PointInNoBand) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-2\n  - name: b\n    concurrency: 8-64\n"),
                 {"concurrency 4", "no band"});
}

TEST(RecipeValidation, PointInTwoBands) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-4\n  - name: b\n    concurrency: 4-64\n"),
                 {"concurrency 4", "two bands", "'a'", "'b'"});
}

TEST(RecipeValidation, KnobGivenTwiceWouldBeSilentlyReplaced) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    max_num_seqs: 32\n    max_num_seqs: 64\n"),
                 {"r.yaml:", "'max_num_seqs' is given twice", "silently replace"});
}

TEST(RecipeValidation, PointOverriddenTwiceWouldBeSilentlyReplaced) {
  expect_refused(base(std::string(kBands) + "points:\n  4:\n    max_num_seqs: 8\n  4:\n    max_num_seqs: 16\n"),
                 {"concurrency 4 is given twice", "silently replace"});
}

TEST(RecipeValidation, OverrideOfAPointThatDoesNotExistWouldBeIgnored) {
  expect_refused(base(std::string(kBands) + "points:\n  8:\n    max_num_seqs: 16\n"),
                 {"concurrency 8", "not in 'concurrency'", "silently ignored"});
}

TEST(RecipeValidation, SpecOverrideWhereNothingSpeculatesWouldBeIgnored) {
  expect_refused(base(std::string(kBands) + "points:\n  16:\n    rollback: lanes\n"),
                 {"concurrency 16", "points.16 sets rollback", "does not speculate", "silently ignored"});
}

TEST(RecipeValidation, TypedAcceptanceLengthIsRefused) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_tokens: 3\n    acceptance_length: 3.5\n"),
                 {"r.yaml:", "'acceptance_length' is never typed", "golden_al"});
}

TEST(RecipeValidation, AlNotInTheGoldenCurve) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_tokens: 5\n"),
                 {"concurrency 1", "draft_tokens 5 has no AL in the golden curve"});
}

TEST(RecipeValidation, AlOutsideOneToKPlusOne) {
  const char* bad = "model: m\ndraft_model: d\ndraft_sample_method: probabilistic\nrejection_sample_method: block\n"
                    "thinking_on:\n  3: 4.5\n";
  // The golden loader or the plan refuses it; either way the message names the range.
  const std::string msg = plan_error(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_tokens: 3\n"), bad);
  ASSERT_FALSE(msg.empty());
  EXPECT_NE(msg.find("4.5"), std::string::npos) << msg;
}

TEST(RecipeValidation, MethodTheCurveWasNotMeasuredWith) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_tokens: 3\n    spec_method: greedy\n"),
                 {"concurrency 1", "spec_method greedy", "block", "would not apply"});
}

TEST(RecipeValidation, DcpNotDividingTheRanks) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    dcp: 3\n"),
                 {"concurrency 1", "dcp 3 does not divide the 8 ranks"});
}

TEST(RecipeValidation, StepBudgetBelowTheVerifyRows) {
  // c=16: window 32 x (1 + 7) = 256 verify rows in a 128-token step.
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_tokens: 7\n    max_num_seqs: 64\n"
                      "    max_num_batched_tokens: 128\n"),
                 {"concurrency 16", "max_num_batched_tokens 128 is below the verify rows 256", "window 32"});
}

TEST(RecipeValidation, WindowAboveMaxNumSeqs) {
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    max_num_seqs: 8\n"),
                 {"concurrency 16", "window 32 exceeds max_num_seqs 8"});
}

TEST(RecipeValidation, ServedNameDiffersFromWhatTheBenchSends) {
  expect_refused(base(kBands, "bench:\n  model: other\n"),
                 {"bench.model 'other'", "served_name 's'", "404"});
}

TEST(RecipeValidation, UnknownKeyNamesItAndItsLine) {
  expect_refused(base(kBands, "hardwre: {}\n"), {"r.yaml:10:", "unknown key 'hardwre'"});
  expect_refused(base("bands:\n  - name: a\n    concurrency: 1-64\n    draft_token: 3\n"),
                 {"r.yaml:14:", "unknown key 'draft_token'"});
}

TEST(RecipeValidation, SpeculationWithoutADraftModel) {
  expect_refused("name: t\nmodel: m\nserved_name: s\ngolden_al: golden.yaml\nconcurrency: [1]\n"
                 "bands:\n  - name: a\n    concurrency: 1-4\n    draft_tokens: 3\n",
                 {"concurrency 1", "no draft_model"});
}

TEST(RecipeValidation, HostTierWithoutAHostBudget) {
  expect_refused("name: t\nmodel: m\nserved_name: s\nconcurrency: [1]\n"
                 "bands:\n  - name: a\n    concurrency: 1-4\n    dram_utilization: 0.3\n",
                 {"concurrency 1", "dram_utilization", "hardware.available_mib"});
}

}  // namespace
}  // namespace ds::recipe
