// The agent tool loop of tests/clients/agent_tool_loop.mjs (the official `openai` npm client
// and ajv) against `deltaserve serve` on the bundled model, models/deltacoder. Skips when the
// CLI, node or the npm packages are missing (scripts/setup installs them); under CI that is a
// failure instead.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/missing_dependency.h"
#include "serve_process.h"

namespace ds {
namespace {

TEST(AgentToolLoop, OfficialClientRunsToolsAndStructuredOutputs) {
  namespace fs = std::filesystem;
  const std::string root = DS_SOURCE_DIR;
  int st = 0;
  testing::run_capture("node --version", &st);
  DS_REQUIRE_DEPENDENCY(st == 0, "node is not installed (run scripts/setup)");
  DS_REQUIRE_DEPENDENCY(fs::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  for (const char* pkg : {"openai", "ajv"})
    DS_REQUIRE_DEPENDENCY(fs::exists(root + "/node_modules/" + pkg + "/package.json"),
                          std::string("node_modules/") + pkg + " is missing (run scripts/setup)");
  testing::ServeProcess p({"--model", root + "/models/deltacoder", "--served-model-name", "deltacoder",
                           "--threads", "2", "--max-model-len", "2048"});
  ASSERT_TRUE(p.wait_healthy()) << p.log();
  const std::string out = testing::run_capture(
      "cd '" + root + "' && DS_BASE_URL=http://127.0.0.1:" + std::to_string(p.port()) +
          " DS_MODEL=deltacoder node tests/clients/agent_tool_loop.mjs",
      &st);
  EXPECT_EQ(st, 0) << out << "\n--- server log ---\n" << p.log();
  EXPECT_NE(out.find("agent tool loop: ok"), std::string::npos) << out;
  std::cout << out;
}

}  // namespace
}  // namespace ds
