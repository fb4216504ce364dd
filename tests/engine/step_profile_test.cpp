// The step profiler: every step is observed per phase and per forward part, the parts that run
// are the model's own kinds (KDA / MLA / MoE for kimi_linear, GQA / dense for llama), and the
// table shows every phase with its share of step time.
#include "engine/step_profile.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <map>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model.h"

namespace ds {
namespace {

using testing::collect;
using testing::greedy_request;
using testing::make_prompt;

// metric{label="value"} -> sample count of a histogram family.
std::map<std::string, double> histogram_counts(prometheus::Registry& r, const std::string& family, const std::string& label) {
  std::map<std::string, double> out;
  for (const auto& f : r.Collect()) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      std::string key;
      for (const auto& l : m.label)
        if (l.name == label) key = l.value;
      out[key] = double(m.histogram.sample_count);
    }
  }
  return out;
}

double step_count(prometheus::Registry& r) {
  for (const auto& f : r.Collect())
    if (f.name == "deltaserve:step_duration_seconds") return double(f.metric.at(0).histogram.sample_count);
  return -1;
}

EngineConfig config() {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.num_kv_blocks = 32;
  c.threads = 2;
  c.profile_steps = 5;  // the table is logged too: the path runs
  return c;
}

TEST(StepProfile, EveryStepObservedPerPhase) {
  testing::FakeEngine f(config());
  auto s = f.engine->submit(greedy_request(make_prompt(100, 1), 20));
  EXPECT_EQ(collect(*s).tokens.size(), 20u);
  f.engine->stop();  // the last step is recorded after its stream ends
  auto& reg = f.engine->metrics().registry();
  const double steps = step_count(reg);
  EXPECT_GE(steps, 20);
  const auto phases = histogram_counts(reg, "deltaserve:step_phase_seconds", "phase");
  for (const char* p : {"schedule", "forward", "sample", "accept", "commit", "stream", "finish", "idle", "between"})
    EXPECT_EQ(phases.at(p), steps) << p;
  EXPECT_EQ(phases.at("draft"), 0) << "no draft model: no draft phase";
}

void expect_parts(const std::string& model, const std::vector<std::string>& ran, const std::vector<std::string>& absent) {
  SCOPED_TRACE(model);
  Engine engine(Model::load(std::string(DS_SOURCE_DIR) + "/tests/data/models/" + model, 2), config());
  auto s = engine.submit(greedy_request(make_prompt(80, 3, 200), 8));
  EXPECT_EQ(collect(*s).tokens.size(), 8u);
  // A stream ends before its step is recorded: stop the engine thread so the last step's
  // phases and parts are all in before they are counted.
  engine.stop();
  auto& reg = engine.metrics().registry();
  const double steps = step_count(reg);
  const auto parts = histogram_counts(reg, "deltaserve:forward_part_seconds", "part");
  for (const auto& p : ran) EXPECT_EQ(parts.at(p), steps) << p << " runs in every forward";
  for (const auto& p : absent) EXPECT_EQ(parts.at(p), 0) << p << " is not in this model";
}

TEST(StepProfile, ForwardPartsAreTheModelsOwnKinds) {
  expect_parts("tiny-hybrid-f32", {"embed", "norms", "kda", "mla", "kv_attention", "moe", "lm_head"}, {"gqa"});
  expect_parts("tiny-llama-f32", {"embed", "norms", "gqa", "kv_attention", "dense_ffn", "lm_head"}, {"kda", "mla", "moe"});
}

TEST(StepProfile, TableShowsEveryPhaseWithItsShare) {
  std::vector<StepSample> w(2);
  for (int i = 0; i < 2; ++i) {
    w[size_t(i)].wall = 0.010 * (i + 1);
    w[size_t(i)].cpu = 0.008 * (i + 1);
    w[size_t(i)].phase[PhaseForward] = 0.008 * (i + 1);
    w[size_t(i)].phase[PhaseSample] = 0.002 * (i + 1);
    w[size_t(i)].forward.seconds[ForwardProfile::Gqa] = 0.005 * (i + 1);
    w[size_t(i)].forward.seconds[ForwardProfile::DenseFfn] = 0.003 * (i + 1);
    w[size_t(i)].rows = 16;
    w[size_t(i)].seqs = w[size_t(i)].decode_seqs = 16;
  }
  const std::string t = StepProfiler::table(w);
  EXPECT_NE(t.find("2 steps: 16.0 rows, 16.0 sequences (16.0 decoding)"), std::string::npos) << t;
  EXPECT_NE(t.find("engine thread on CPU 80%"), std::string::npos) << t;
  // forward: mean 12 ms of a 15 ms mean step = 80%.
  EXPECT_NE(t.find("forward               12.000"), std::string::npos) << t;
  EXPECT_NE(t.find(" 80.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("    gqa"), std::string::npos) << t;
  EXPECT_NE(t.find("    dense_ffn"), std::string::npos) << t;
  EXPECT_EQ(t.find("kda"), std::string::npos) << "parts that never ran are left out";
}

}  // namespace
}  // namespace ds
