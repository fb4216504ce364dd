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

// A NUL in a name once cut `recipe plan`'s output short. Every string of a recipe must be UTF-8
// without control characters, names must not read as flags on the command lines they are passed
// on, and the refusal names the field and its line (and never echoes the bad bytes).
TEST(RecipeValidation, ControlCharactersInNamesAndStringsAreRefused) {
  const std::string rest = "model: m\ndraft_model: d\ngolden_al: golden.yaml\nconcurrency: [1, 4, 16]\n";
  const std::string served = "served_name: s\n";
  for (const std::string& bad : {std::string("\"t\\0x\""), std::string("\"t\\nx\""), std::string("\"t\\tx\""),
                                 std::string("\"t\\ex[2J\""), std::string("\"t\\x7f\""), std::string("\"t\\u0085x\""),
                                 std::string("\"\\0\""), std::string("\"t\\rx\"")}) {
    const std::string msg = plan_error("name: " + bad + "\n" + served + rest + kBands);
    EXPECT_NE(msg.find("r.yaml:1: 'name' holds a control character"), std::string::npos) << bad << ": " << msg;
    for (char c : msg) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) << bad << ": " << msg;
  }
  expect_refused("name: t\nserved_name: \"s\\0evil\"\n" + rest + kBands, {"r.yaml:2: 'served_name' holds a control character (U+0000)"});
  expect_refused("name: t\n" + served + rest + "bench:\n  model: \"s\\x1b\"\n" + kBands,
                 {"r.yaml:8: 'bench.model' holds a control character (U+001B)"});
  expect_refused(base("bands:\n  - name: \"a\\0b\"\n    concurrency: 1-64\n"), {"r.yaml:12: 'name' holds a control character"});
  expect_refused("name: t\n" + served + "model: \"m\\0/x\"\ndraft_model: d\nconcurrency: [1]\nbands:\n  - name: a\n    concurrency: 1-4\n",
                 {"r.yaml:3: 'model' holds a control character"});
  expect_refused(base(kBands, "server:\n  host: \"127.0.0.1\\n\"\n"), {"'host' holds a control character (U+000A)"});
  expect_refused(base(kBands, "\"hard\\0ware\": {}\n"), {"r.yaml:10:", "recipe: a key holds a control character"});
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong encoding.
  // (yaml-cpp writes the YAML escape \N as the byte 0x85, which is not UTF-8 either.)
  for (const std::string& bytes :
       {std::string("t\x80"), std::string("t\xe2\x82"), std::string("t\xc0\xaf"), std::string("\"t\\N\"")}) {
    const std::string msg = plan_error("name: " + bytes + "\n" + served + rest + kBands);
    EXPECT_NE(msg.find("r.yaml:1:"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("'name' is not UTF-8") != std::string::npos || msg.find("not valid YAML") != std::string::npos) << msg;
  }
  // Names go on command lines as values: one that starts with '-' would read as a flag.
  expect_refused("name: --out=/tmp/x\n" + served + rest + kBands, {"r.yaml:1: 'name' is '--out=/tmp/x'", "start with '-'"});
  expect_refused("name: t\nserved_name: -x\n" + rest + kBands, {"r.yaml:2: 'served_name'", "start with '-'"});
  expect_refused("name: \"\"\n" + served + rest + kBands, {"r.yaml:1: 'name' is empty"});
  // What is fine stays fine: any printable Unicode.
  std::string unicode = base(kBands);
  unicode.replace(0, 8, "name: \"Kimi K3 — démo ✓\"\n");
  EXPECT_EQ(plan_error(unicode), "");
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
