// A speculative sweep run for real: two points on two servers (K 3 with state lanes at
// concurrency 1, K 1 with replay at 2), the tiny hybrid target drafted by the tiny llama (they
// share a tokenizer). The draft is staged into the cache beside the target and the servers read
// the staged copies; while each point's server runs, its /v1/models says what the plan says: the
// served name, K, the verifier, the drafting, the rollback and the golden AL it accepts at.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "../support/missing_dependency.h"
#include "bench/http_target.h"
#include "bench/server_probe.h"
#include "recipe/ledger.h"
#include "recipe/recipe.h"
#include "recipe/run.h"
#include "recipe_test_util.h"

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_text;
using testing::TempDir;

std::string data_model(const std::string& name) { return std::string(DS_SOURCE_DIR) + "/tests/data/models/" + name; }

// The value after `flag` in argv, or "" when it is absent.
std::string flag_value(const json& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1].get<std::string>();
  return "";
}

TEST(RecipeRun, SpeculativeSweepServesTheStagedDraftAsPlanned) {
  DS_REQUIRE_DEPENDENCY(fs::exists(DS_CLI), "the deltaserve CLI is not built");
  TempDir d("spec_sweep");
  const int port = ds::testing::free_port();
  const std::string golden = d.file("golden.yaml", testing::kGolden);
  const std::string path = d.file(
      "spec.yaml", "name: spec-sweep\nmodel: " + data_model("tiny-hybrid-f32") + "\ndraft_model: " +
                       data_model("tiny-llama-f32") + "\nserved_name: tiny\ngolden_al: golden.yaml\n" +
                       "hardware:\n  available_mib: this-machine\n"
                       "server:\n  port: " + std::to_string(port) + "\n  threads: 1\n  kv_pool_gb: 0.25\n"
                       "bench:\n  duration_s: 1\n  grace_period_s: 2\n  warmup_requests_per_lane: 0\n"
                       "concurrency: [1, 2]\nbands:\n"
                       "  - name: lanes\n    concurrency: 1-1\n    draft_tokens: 3\n    rollback: lanes\n"
                       "  - name: replay\n    concurrency: 2-2\n    draft_tokens: 1\n    rollback: replay\n");
  RunOptions o;
  o.out_dir = (d.path / "out").string();
  o.program = DS_CLI;
  o.model_cache = (d.path / "cache").string();
  // run_recipe logs a point's bench line once its server answers /health and lists the served
  // name, and before the bench starts: the server is up then, so its /v1/models is read there.
  std::map<int, json> cards;
  std::string log;
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  o.log = [&](const std::string& s) {
    log += s + "\n";
    if (s.rfind("c=", 0) == 0 && s.find(" bench --url ") != std::string::npos)
      cards[std::stoi(s.substr(2))] = bench::ServerProbe(bench::HttpTarget::parse(url)).models();
  };
  const RunSummary sum = run_recipe(load_recipe(path), o);
  ASSERT_EQ(sum.points_ok, 2) << log << read_text(d.path / "out/points/c1/server.log") << read_text(d.path / "out/points/c1/bench.log")
                              << read_text(d.path / "out/points/c2/server.log");
  EXPECT_NE(log.find("staged " + data_model("tiny-llama-f32") + " -> "), std::string::npos) << log;

  const std::vector<json> entries = read_ledger(sum.ledger);
  ASSERT_EQ(entries.size(), 2u);
  for (const json& e : entries) {
    const int c = e.at("concurrency").get<int>();
    SCOPED_TRACE("concurrency " + std::to_string(c));
    const json& plan = e.at("plan");
    EXPECT_EQ(plan.at("draft_tokens").get<int>(), c == 1 ? 3 : 1);
    EXPECT_EQ(plan.at("rollback"), c == 1 ? "lanes" : "replay");
    EXPECT_EQ(e.at("server_reused"), false);  // two servers: their settings differ

    // The draft was staged: copied into the cache, checksummed, apart from the target, and the
    // server was given the staged copy, not the recipe's folder.
    const json& draft = e.at("staged").at("draft_model");
    EXPECT_EQ(draft.at("source"), data_model("tiny-llama-f32"));
    EXPECT_EQ(draft.at("outcome"), "copied");
    EXPECT_EQ(draft.at("files").size(), 4u);
    const std::string staged = draft.at("staged").get<std::string>();
    EXPECT_EQ(fs::path(staged).parent_path(), fs::path(o.model_cache));
    EXPECT_NE(staged, e.at("staged").at("model").at("staged").get<std::string>());
    for (const auto& [file, sum256] : draft.at("files").items()) EXPECT_TRUE(fs::exists(fs::path(staged) / file)) << file;
    EXPECT_EQ(flag_value(plan.at("serve"), "--draft-model"), staged);
    EXPECT_EQ(flag_value(plan.at("serve"), "--model"), e.at("staged").at("model").at("staged").get<std::string>());

    // What the running server said of itself is what the plan says.
    ASSERT_TRUE(cards.count(c)) << "no /v1/models read while the point's server ran\n" << log;
    const json& models = cards[c];
    ASSERT_TRUE(models.is_object() && models.contains("data") && models["data"].size() == 1) << models;
    const json& card = models["data"][0];
    EXPECT_EQ(card.at("id"), "tiny");
    const json& spec = card.at("speculative_decoding");
    EXPECT_EQ(spec.at("enabled"), true) << spec;
    EXPECT_EQ(spec.at("drafter"), "draft_model") << spec;
    EXPECT_EQ(spec.at("auto"), false) << spec;
    EXPECT_EQ(spec.at("num_speculative_tokens"), plan.at("draft_tokens")) << spec;
    EXPECT_EQ(spec.at("spec_method"), plan.at("spec_method")) << spec;
    EXPECT_EQ(spec.at("draft_sample"), plan.at("draft_sample")) << spec;
    EXPECT_EQ(spec.at("state_rollback"), plan.at("rollback")) << spec;
    ASSERT_TRUE(spec.at("synthetic_acceptance").is_object()) << spec;
    EXPECT_DOUBLE_EQ(spec["synthetic_acceptance"].at("acceptance_length").get<double>(),
                     plan.at("acceptance_length").get<double>());
    EXPECT_EQ(spec["synthetic_acceptance"].at("source"), golden);
    EXPECT_EQ(card.at("parallel").at("tp"), 1);
    EXPECT_EQ(card.at("parallel").at("dcp"), plan.at("dcp"));
    EXPECT_EQ(card.at("kernel_isa"), e.at("server").at("kernel_isa"));  // the ledger's record of the same server
  }
}

}  // namespace
}  // namespace ds::recipe
