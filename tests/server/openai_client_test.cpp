// Runs tests/clients/openai_client.mjs (the official `openai` npm package) against an
// in-process server. Skips when node or node_modules/openai is missing (scripts/setup installs
// both); under CI (CI=true) that is a failure instead.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "../support/missing_dependency.h"
#include "../support/run_capture.h"
#include "server_harness.h"

namespace ds {
namespace {

TEST(OpenAIClient, ChatStreamCompletionModels) {
  const std::string root = DS_SOURCE_DIR;
  int st = 0;
  testing::run_capture("node --version > /dev/null 2>&1", &st);
  DS_REQUIRE_DEPENDENCY(st == 0, "node is not installed (run scripts/setup)");
  DS_REQUIRE_DEPENDENCY(std::filesystem::exists(root + "/node_modules/openai/package.json"),
                        "node_modules/openai is missing (run scripts/setup)");
  testing::TestServer s;
  const std::string cmd = "cd '" + root + "' && DS_BASE_URL=http://127.0.0.1:" + std::to_string(s.port) +
                          " DS_MODEL=fake node tests/clients/openai_client.mjs 2>&1";
  const std::string out = testing::run_capture(cmd, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("openai client: ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace ds
