// Long contexts on the bundled model, `deltaserve serve` as a process: the default serve takes
// prompts far past the old 4,096 limit (coding agents' first prompts are 10-40 thousand tokens)
// without a large start-up footprint, a second turn reads its prefix from the cache, and
// --max-model-len past max_position_embeddings warns for the bundled NoPE model and is refused for
// a RoPE (Llama) model. Skips when the CLI is not built (fails under CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../support/missing_dependency.h"
#include "serve_process.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;

// Token ids that are not a repetition of a short pattern (so nothing but the real prefix matches).
std::vector<int> prompt_ids(int n, int seed) {
  std::vector<int> ids;
  uint64_t x = uint64_t(seed) * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    ids.push_back(int(x % 4000));  // below the special tokens (4093..4095)
  }
  return ids;
}

json completion(const std::vector<int>& prompt) {
  return {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
}

TEST(LongContextServe, DefaultServeTakesLongPromptsAndCachesTheirPrefix) {
  DS_REQUIRE_DEPENDENCY(std::filesystem::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  ServeProcess p({"--model", std::string(DS_SOURCE_DIR) + "/models/deltacoder", "--threads", "2"});
  ASSERT_TRUE(p.wait_healthy()) << p.log();
  const HttpResult models = http_call(p.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.raw;
  EXPECT_GE(models.body["data"][0]["max_model_len"].get<int>(), 131072) << models.raw;
  // The KV pool and snapshots are reserved, not touched: 122 MiB at start when measured.
  EXPECT_LT(p.rss_kb(), 512 * 1024) << "RSS at start";
  EXPECT_EQ(p.log().find("[warning]"), std::string::npos) << p.log();

  // 10,000 tokens: past the old limit, short enough for a test on two cores.
  std::vector<int> first = prompt_ids(10000, 1);
  HttpResult r = post(p.port(), "/v1/completions", completion(first));
  ASSERT_EQ(r.status, 200) << r.raw << "\n" << p.log();
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 10000) << r.raw;

  // A second turn: the first prompt and 300 new tokens. A coding agent's next turn must read at
  // least 90% of its prompt from the prefix cache.
  std::vector<int> second = first;
  for (int t : prompt_ids(300, 2)) second.push_back(t);
  r = post(p.port(), "/v1/completions", completion(second));
  ASSERT_EQ(r.status, 200) << r.raw;
  const int cached = r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, int(0.9 * double(second.size()))) << r.raw;
  EXPECT_LE(cached, 10000) << r.raw;
}

TEST(LongContextServe, PastMaxPositionEmbeddingsWarnsWithoutPositionsAndRefusesRope) {
  DS_REQUIRE_DEPENDENCY(std::filesystem::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  const std::string root = DS_SOURCE_DIR;
  {
    ServeProcess p({"--model", root + "/models/deltacoder", "--threads", "1", "--max-model-len", "262144"});
    ASSERT_TRUE(p.wait_healthy()) << p.log();
    EXPECT_NE(p.log().find("[warning] --max-model-len 262144 is above the model's max_position_embeddings 131072: its "
                           "attention has no positional encoding"),
              std::string::npos)
        << p.log();
    const HttpResult models = http_call(p.port(), "GET", "/v1/models");
    EXPECT_EQ(models.body["data"][0]["max_model_len"], 262144) << models.raw;
  }
  ServeProcess p({"--model", root + "/tests/data/models/tiny-llama-f32", "--threads", "1", "--max-model-len", "9000"});
  EXPECT_FALSE(p.wait_healthy(60)) << p.log();
  EXPECT_NE(p.log().find("[error] invalid settings: --max-model-len 9000 exceeds the model's max_position_embeddings "
                         "8192: its attention uses rotary positions (RoPE), which hold only up to 8192 positions; "
                         "allowed range [2, 8192]"),
            std::string::npos)
      << p.log();
}

}  // namespace
}  // namespace ds
