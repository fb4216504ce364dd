// Runs tests/clients/anthropic_sdk.mjs (the official `@anthropic-ai/sdk` npm package) against an
// in-process server on the fake model, prefix caching on. Skips when node or the package is
// missing (scripts/setup installs both); under CI (CI=true) that is a failure instead.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/missing_dependency.h"
#include "../support/run_capture.h"
#include "server_harness.h"

namespace ds {
namespace {

TEST(AnthropicSdk, MessagesStreamToolLoopCountTokensErrors) {
  const std::string root = DS_SOURCE_DIR;
  int st = 0;
  testing::run_capture("node --version > /dev/null 2>&1", &st);
  DS_REQUIRE_DEPENDENCY(st == 0, "node is not installed (run scripts/setup)");
  DS_REQUIRE_DEPENDENCY(std::filesystem::exists(root + "/node_modules/@anthropic-ai/sdk/package.json"),
                        "node_modules/@anthropic-ai/sdk is missing (run scripts/setup)");
  EngineConfig cfg = testing::TestServer::default_config();
  cfg.prefix.enabled = true;
  cfg.max_model_len = 4096;  // the test tokenizer spends many tokens on English
  cfg.num_kv_blocks = 1024;
  testing::TestServer s(cfg);
  const std::string cmd = "cd '" + root + "' && DS_BASE_URL=http://127.0.0.1:" + std::to_string(s.port) +
                          " DS_MODEL=fake node tests/clients/anthropic_sdk.mjs 2>&1";
  const std::string out = testing::run_capture(cmd, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("anthropic sdk: ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace ds
