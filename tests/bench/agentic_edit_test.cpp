// --synthetic agentic-edit: the held-out files it reads, the messages it writes, and the closed
// loop against a stub chat server (each turn resends the history with the server's own earlier
// replies, the first request of a lane is warm-up, the run stops at its request bound).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

#include "bench/agentic_edit.h"
#include "core/error.h"
#include "../support/wait_until.h"
#include "../support/remove_at_exit.h"

namespace ds::bench {
namespace {

using nlohmann::json;

std::filesystem::path temp_corpus(bool with_missing) {
  const auto dir = std::filesystem::temp_directory_path() / ("ds-edit-" + std::to_string(::getpid()));
  ds::test::remove_at_exit(dir.string());
  std::filesystem::create_directories(dir / "pkg");
  std::ofstream(dir / "a.py") << "import os\n\n\nclass A:\n    def first(self, x):\n        return x + 1\n\n"
                                 "    def second(self):\n        return 2\n";
  std::ofstream(dir / "pkg" / "consts.py") << "X = 1\nY = 2\n";  // no function: skipped
  json c = {{"root", dir.string()}, {"heldout_paths", {"a.py", "pkg/consts.py"}}};
  if (with_missing) c["heldout_paths"].push_back("gone.py");
  std::ofstream(dir / "corpus.json") << c.dump();
  return dir / "corpus.json";
}

TEST(AgenticEdit, ReadsTheHeldOutFilesThatDefineFunctions) {
  const auto files = load_edit_files(temp_corpus(false).string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, "a.py");
  EXPECT_EQ(files[0].defs.size(), 2u);
  try {
    load_edit_files(temp_corpus(true).string());
    FAIL() << "a missing file must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gone.py"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_edit_files("/nonexistent/corpus.json"), Error);
}

TEST(AgenticEdit, MessagesQuoteTheFileAndOpenTheFunction) {
  AgenticEditConfig cfg;
  AgenticEdit edit(cfg, load_edit_files(temp_corpus(false).string()));
  for (uint64_t session = 0; session < 6; ++session) {
    const std::string m0 = edit.user_message(session, 0), m1 = edit.user_message(session, 1);
    EXPECT_EQ(m0, edit.user_message(session, 0)) << "a pure function of session and turn";
    EXPECT_NE(m0.find("read_file a.py"), std::string::npos);
    EXPECT_NE(m0.find("def first(self, x):"), std::string::npos) << "the excerpt carries the file";
    const bool first = m0.find("`first`") != std::string::npos;
    EXPECT_NE(m0.rfind(first ? "```python\ndef first(" : "```python\ndef second("), std::string::npos);
    EXPECT_NE(m1.find("FAILED tests/test_"), std::string::npos);
  }
}

// A chat server that answers each request with "reply <n>" and remembers the messages it got.
class ChatStub {
 public:
  ChatStub() {
    srv_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      std::string reply;
      {
        std::lock_guard lock(mu_);
        reply = "reply " + std::to_string(bodies_.size());
        bodies_.push_back(body);
      }
      std::string out = "data: " + json({{"choices", {{{"index", 0}, {"delta", {{"content", reply}}}}}}}).dump() + "\n\n";
      out += "data: " + json({{"choices", {{{"index", 0}, {"delta", json::object()}, {"finish_reason", "stop"}}}}}).dump() + "\n\n";
      out += "data: " + json({{"choices", json::array()}, {"usage", {{"prompt_tokens", 100}, {"completion_tokens", 2}}}}).dump() +
             "\n\ndata: [DONE]\n\n";
      res.set_content(out, "text/event-stream");
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    // A server that never comes up fails here instead of hanging the run.
    if (!ds::test::wait_until([this] { return srv_.is_running(); })) throw std::runtime_error("the stub server did not start");
  }
  ~ChatStub() {
    srv_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> bodies_;
};

TEST(AgenticEdit, ClosedLoopResendsTheHistoryWithTheServersReplies) {
  ChatStub stub;
  AgenticEditConfig cfg;
  cfg.turns = 3;
  cfg.max_tokens = 16;
  AgenticEdit edit(cfg, load_edit_files(temp_corpus(false).string()));
  SenderConfig sc;
  sc.target = HttpTarget::parse(stub.url());
  sc.model = "m";
  sc.origin = Clock::now();
  LoadConfig lc;
  lc.concurrency = 2;
  lc.duration_s = 60;
  lc.max_requests = 10;
  lc.warmup_requests_per_lane = 1;
  int opened = 0;
  const ReplayOutput out = edit.run(sc, lc, [&] { ++opened; });
  EXPECT_EQ(opened, 1);
  const auto bodies = stub.bodies();
  // 10 measured, 2 warm-up; a lane may have claimed the 11th slot and stopped.
  EXPECT_EQ(out.records.size(), bodies.size());
  EXPECT_GE(bodies.size(), 12u);
  int warmups = 0;
  for (const RequestRecord& r : out.records) {
    EXPECT_TRUE(r.result.error.empty()) << r.result.error;
    EXPECT_EQ(r.result.text.rfind("reply ", 0), 0u) << "the streamed content is kept";
    warmups += r.warmup;
  }
  EXPECT_EQ(warmups, 2) << "one per lane";
  for (const json& b : bodies) {
    EXPECT_EQ(b["max_tokens"], 16);
    EXPECT_FALSE(b.contains("ignore_eos")) << "the model's own end token ends a reply";
    const json& m = b["messages"];
    ASSERT_EQ(m[0]["role"], "system");
    ASSERT_EQ(m.size() % 2, 0u) << "system, then user / assistant pairs, then the new user turn";
    ASSERT_LE(m.size(), 6u) << "at most 3 turns";
    for (size_t i = 2; i < m.size(); i += 2) {
      EXPECT_EQ(m[i]["role"], "assistant");
      EXPECT_EQ(m[i]["content"].get<std::string>().rfind("reply ", 0), 0u) << "the server's own earlier reply";
    }
  }
}

}  // namespace
}  // namespace ds::bench
