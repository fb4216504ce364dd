// `deltaserve generate` on the bundled model as a process, stdout and stderr read apart: stdout
// carries only what the command prints (the JSON object with --json, the text without), and every
// log line goes to stderr, under every speculation mode the CLI offers. Scripts parse that
// stdout; a log line on it (issue 41: "[info] speculation auto: ..." before the JSON) broke them.
// Skips when the CLI is not built (fails under CI).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "../support/missing_dependency.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out, err;
};

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Runs `deltaserve generate` on models/deltacoder with `args`; stdout and stderr kept apart.
CliRun generate(const std::string& args) {
  const std::string root = DS_SOURCE_DIR;
  const std::string err_file =
      (fs::temp_directory_path() / ("ds_generate_stderr_" + std::to_string(getpid()) + ".txt")).string();
  const std::string cmd = quoted(DS_CLI) + " generate --model " + quoted(root + "/models/deltacoder") + " --threads 1 " +
                          args + " 2>" + quoted(err_file);
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  fs::remove(err_file);
  return r;
}

// A line in spdlog's default pattern: "[2026-12-07 17:28:31.522] [info] ...".
const std::regex kLogLine(R"((^|\n)\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\] \[)");

// A prompt that repeats itself, so suffix drafting has something to propose.
const char* kPrompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n";

struct Mode {
  const char* name;
  std::string args;    // speculation flags ("" for none)
  const char* drafter;  // the JSON's speculative.drafter, nullptr when speculation is off
};

std::vector<Mode> modes() {
  const std::string root = DS_SOURCE_DIR;
  const std::string draft = " --draft-model " + quoted(root + "/models/deltacoder-draft");
  const std::string dspark = " --draft-model " + quoted(root + "/models/deltacoder-dspark");
  return {
      {"none", "", nullptr},
      {"draft model, auto", draft + " --num-speculative-tokens auto", "draft_model"},
      {"draft model, 3", draft + " --num-speculative-tokens 3", "draft_model"},
      {"draft model, greedy verification", draft + " --num-speculative-tokens 2 --spec-method greedy", "draft_model"},
      {"draft model, probabilistic verification",
       draft + " --num-speculative-tokens 2 --spec-method probabilistic --temperature 0.8 --seed 3", "draft_model"},
      {"draft model, synthetic acceptance", draft + " --num-speculative-tokens 3 --spec-acceptance-length 2.5",
       "draft_model"},
      {"suffix, auto", " --spec-method suffix --num-speculative-tokens auto", "suffix"},
      {"suffix, 4", " --spec-method suffix --num-speculative-tokens 4", "suffix"},
      {"parallel drafter, auto", dspark + " --num-speculative-tokens auto", "parallel_drafter"},
      {"parallel drafter, 4", dspark + " --num-speculative-tokens 4", "parallel_drafter"},
  };
}

TEST(GenerateStdout, JsonIsTheWholeStdoutUnderEverySpeculationMode) {
  DS_REQUIRE_DEPENDENCY(fs::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  for (const Mode& m : modes()) {
    SCOPED_TRACE(m.name);
    const CliRun r = generate("--json --max-tokens 24 --ignore-eos --prompt " + quoted(kPrompt) + m.args);
    ASSERT_EQ(r.status, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(r.out);
    } catch (const std::exception& e) {
      FAIL() << "stdout is not one JSON value (" << e.what() << "):\n" << r.out << "\nstderr:\n" << r.err;
    }
    EXPECT_EQ(j["tokens"].size(), 24u) << r.out;
    if (m.drafter) {
      ASSERT_TRUE(j.contains("speculative")) << r.out;
      EXPECT_EQ(j["speculative"]["drafter"], m.drafter) << r.out;
    } else {
      EXPECT_FALSE(j.contains("speculative")) << r.out;
    }
    // auto's calibration line still appears, on stderr.
    if (m.args.find(" auto") != std::string::npos) {
      EXPECT_NE(r.err.find("[info] speculation auto"), std::string::npos) << r.err;
    }
  }
}

TEST(GenerateStdout, TextHasNoLogLines) {
  DS_REQUIRE_DEPENDENCY(fs::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  const CliRun r = generate("--max-tokens 24 --ignore-eos --spec-method suffix --num-speculative-tokens auto --prompt " +
                         quoted(kPrompt));
  ASSERT_EQ(r.status, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_FALSE(std::regex_search(r.out, kLogLine)) << "a log line on stdout:\n" << r.out;
  EXPECT_EQ(r.out.find("[info]"), std::string::npos) << r.out;
  EXPECT_FALSE(r.out.empty());
  // The log lines the run writes are all on stderr.
  EXPECT_NE(r.err.find("[info] speculation auto"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[info] prefill "), std::string::npos) << r.err;
}

// An error is a log line too: on stderr, with stdout empty.
TEST(GenerateStdout, ErrorsGoToStderr) {
  DS_REQUIRE_DEPENDENCY(fs::exists(DS_CLI), "deltaserve not built at " DS_CLI);
  const CliRun r = generate("--json --prompt-ids 999999");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("[error] prompt token id 999999 outside [0, 4096)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ds
