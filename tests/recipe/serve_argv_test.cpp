// Every point of every bundled recipe (recipes/*.yaml, the published reference plan among them):
// its planned `serve` command, parsed back by the CLI's own flag declarations (cli/serve_flags.h)
// into the struct `deltaserve serve` runs on, says what the plan says, field by field. The
// speculative flags go on through the CLI's conversion and the engine's start-up resolution
// (spec_options_of, resolve_spec_options), so the AL the server will use is the one the plan
// printed. No flag outside those the plan owns is given: every other setting keeps serve's
// default. Checking the command line as text (a few flags searched for) let a wrong value of
// any other flag through.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/serve_flags.h"
#include "recipe/plan.h"
#include "recipe/recipe.h"
#include "spec_decode/spec_options.h"

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;

// What the CLI makes of one serve command line.
struct ParsedServe {
  cli::ServeArgs args;
  std::set<std::string> given;  // the flags on the line, by their long names
  SpecOptions spec;             // as the engine starts with them (resolved: AL from the golden curve)
};

// argv: the program, "serve", then its flags (what follows mpirun's own arguments).
ParsedServe parse_serve(const std::vector<std::string>& argv) {
  ParsedServe p;
  CLI::App app{"serve-argv-test"};
  app.require_subcommand(1);
  CLI::App* cmd = app.add_subcommand("serve", "");
  cli::add_serve_flags(cmd, &p.args);
  std::vector<const char*> av;
  for (const std::string& a : argv) av.push_back(a.c_str());
  app.parse(int(av.size()), av.data());
  for (const CLI::Option* o : cmd->get_options())
    if (o->count() > 0) p.given.insert(o->get_name());
  // The SpecFlags' option pointers belong to `app`: convert while it lives, then drop them.
  p.spec = cli::spec_options_of(p.args.spec);
  resolve_spec_options(&p.spec);
  p.args.spec.method_opt = p.args.spec.draft_sample_opt = p.args.spec.confidence_opt = nullptr;
  p.args.spec.suffix_cache_opt = p.args.spec.suffix_depth_opt = nullptr;
  return p;
}

// The flags whose values come from the plan (the recipe, its band and point). Any other flag on a
// planned command line would set something the plan does not hold.
const std::set<std::string> kPlanFlags = {
    "--model", "--served-model-name", "--host", "--port", "--max-num-seqs", "--max-num-batched-tokens", "--threads",
    "--kv-pool-gb", "--tp", "--dcp", "--total-cpu-dram-gb", "--draft-model", "--num-speculative-tokens",
    "--spec-method", "--draft-sample", "--state-rollback", "--spec-window", "--golden-al"};
const std::set<std::string> kSpecFlags = {"--draft-model",  "--num-speculative-tokens", "--spec-method", "--draft-sample",
                                          "--state-rollback", "--spec-window", "--golden-al"};

void expect_point_parses_to_its_plan(const Recipe& r, const Plan& plan, const PointPlan& p) {
  const std::vector<std::string>& argv = p.serve_argv;
  size_t at = 0;
  if (r.hw.ranks > 1) {
    // One process per rank, not bound to one core each (plan.cpp says why).
    const std::vector<std::string> mpirun = {"mpirun", "-np", std::to_string(r.hw.ranks), "--bind-to", "none"};
    ASSERT_GE(argv.size(), mpirun.size());
    EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + long(mpirun.size())), mpirun);
    at = mpirun.size();
  }
  ASSERT_GE(argv.size(), at + 2);
  EXPECT_EQ(argv[at], "deltaserve");
  EXPECT_EQ(argv[at + 1], "serve");
  ParsedServe parsed;
  try {
    parsed = parse_serve(std::vector<std::string>(argv.begin() + long(at), argv.end()));
  } catch (const std::exception& e) {
    FAIL() << "serve refuses the planned line: " << e.what() << "\n" << shell_line(argv);
  }
  const cli::ServeArgs& a = parsed.args;
  const SpecOptions& s = parsed.spec;

  for (const std::string& f : parsed.given)
    EXPECT_TRUE(kPlanFlags.count(f)) << f << " is on the line but no plan field holds it: " << shell_line(argv);

  EXPECT_EQ(a.model, plan.model);
  EXPECT_EQ(a.served_names, std::vector<std::string>{plan.served_name});
  EXPECT_EQ(a.host, r.server.host);
  EXPECT_EQ(a.port, r.server.port);
  EXPECT_EQ(a.engine.max_num_seqs, p.max_num_seqs);
  EXPECT_EQ(a.engine.max_num_batched_tokens, p.max_num_batched_tokens);
  EXPECT_EQ(a.engine.threads, r.server.threads);
  EXPECT_NEAR(a.engine.kv_pool_gb, r.server.kv_pool_gb, 5e-4);  // printed with 3 decimals
  EXPECT_EQ(a.ranks.tp, r.hw.ranks);
  EXPECT_EQ(a.ranks.dcp, p.dcp);
  EXPECT_EQ(a.ranks.total_cpu_dram_gb, double(p.total_cpu_dram_gb));
  EXPECT_EQ(int64_t(a.ranks.total_cpu_dram_gb) / a.ranks.tp, p.per_rank_dram_gb);
  // The step's shape: the verify rows fit the step's token budget, the window its sequences.
  EXPECT_GE(a.engine.max_num_batched_tokens, p.verify_rows);
  EXPECT_GE(a.engine.max_num_batched_tokens, a.engine.max_num_seqs);

  const bool speculates = p.draft_tokens > 0;
  EXPECT_EQ(s.enabled(), speculates);
  if (!speculates) {
    for (const std::string& f : kSpecFlags) EXPECT_FALSE(parsed.given.count(f)) << f << " without speculation";
    EXPECT_EQ(s.window, 0);
    EXPECT_FALSE(s.synthetic());
    return;
  }
  EXPECT_TRUE(s.has_draft_model());
  EXPECT_EQ(s.draft_model, plan.draft_model);
  EXPECT_EQ(s.num_speculative_tokens, p.draft_tokens);
  EXPECT_FALSE(s.auto_k);
  EXPECT_EQ(s.method, parse_spec_method(p.spec_method));
  EXPECT_EQ(s.draft_sample, parse_draft_sample(p.draft_sample));
  EXPECT_EQ(s.state_rollback, p.rollback);
  EXPECT_EQ(s.window, p.window);
  EXPECT_LE(s.window, a.engine.max_num_seqs);
  EXPECT_EQ(s.window * (1 + s.num_speculative_tokens), p.verify_rows);
  EXPECT_EQ(s.golden_al_file, plan.golden_al);
  // The AL the server reads from the golden curve for its K is the one the plan printed.
  EXPECT_TRUE(s.synthetic());
  EXPECT_DOUBLE_EQ(s.acceptance_length, p.acceptance_length);
}

std::vector<std::string> bundled_recipes() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(std::string(DS_SOURCE_DIR) + "/recipes"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RecipeServeArgv, EveryPointOfEveryBundledRecipeParsesBackToItsPlan) {
  const std::vector<std::string> recipes = bundled_recipes();
  // The reference plan and the demo at least: a glob that found nothing would check nothing.
  ASSERT_GE(recipes.size(), 2u);
  int points = 0, speculative = 0;
  for (const std::string& path : recipes) {
    SCOPED_TRACE(path);
    const Recipe r = load_recipe(path);
    PlanOptions o;
    o.machine_available_mib = 16384;  // for `available_mib: this-machine`: the same plan on every machine
    const Plan plan = plan_recipe(r, o);
    for (const PointPlan& p : plan.points) {
      SCOPED_TRACE("concurrency " + std::to_string(p.concurrency) + ": " + shell_line(p.serve_argv));
      expect_point_parses_to_its_plan(r, plan, p);
      ++points;
      speculative += p.draft_tokens > 0;
    }
  }
  EXPECT_GE(points, 16);  // 11 of the reference, 5 of the demo
  EXPECT_GT(speculative, 0);
  EXPECT_LT(speculative, points);
}

// The CLI's own parser is what the test above trusts: it must see a flag the plan does not own,
// and a wrong value, as the comparison needs them seen.
TEST(RecipeServeArgv, TheParserSeesAStrayFlagAndItsValue) {
  const ParsedServe p = parse_serve({"deltaserve", "serve", "--model", "m", "--kv-cache-dtype", "bf16", "--max-num-seqs",
                                     "24", "--draft-model", "d", "--num-speculative-tokens", "3"});
  EXPECT_TRUE(p.given.count("--kv-cache-dtype"));
  EXPECT_FALSE(kPlanFlags.count("--kv-cache-dtype"));
  EXPECT_EQ(p.args.engine.kv_cache_dtype, KvDtype::BF16);
  EXPECT_EQ(p.args.engine.max_num_seqs, 24);
  EXPECT_EQ(p.spec.num_speculative_tokens, 3);
  EXPECT_EQ(p.spec.draft_model, "d");
}

// The repository's copy of the reference golden curve is the reference's own (../shared holds
// the published plan next to this repository on the machines it was written on; a clone
// elsewhere has no ../shared, and skips).
TEST(RecipeServeArgv, BundledGoldenCurveIsTheReferenceCopy) {
  const fs::path shared = fs::path(DS_SOURCE_DIR) / ".." / "shared" / "reference" / "golden_al_kimik3_dspark_block.yaml";
  if (!fs::exists(shared)) GTEST_SKIP() << shared.string() << " is absent (no ../shared beside this checkout)";
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  EXPECT_EQ(read(fs::path(DS_SOURCE_DIR) / "recipes" / "golden" / "golden_al_kimik3_dspark_block.yaml"), read(shared));
}

}  // namespace
}  // namespace ds::recipe
