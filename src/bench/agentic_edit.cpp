#include "bench/agentic_edit.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/hash.h"
#include "bench/text_file.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;

std::vector<EditFile> load_edit_files(const std::string& corpus_json) {
  DS_CHECK(std::filesystem::exists(corpus_json), "--edit-corpus " + corpus_json + " does not exist");
  const json c = parse_json_or_discarded(read_text_file(corpus_json));
  DS_CHECK(c.is_object() && c.contains("root") && c.contains("heldout_paths") && c["heldout_paths"].is_array(),
           "--edit-corpus " + corpus_json + " has no root and heldout_paths");
  const std::filesystem::path root = c["root"].get<std::string>();
  std::vector<EditFile> out;
  for (const json& p : c["heldout_paths"]) {
    const std::filesystem::path file = root / p.get<std::string>();
    DS_CHECK(std::filesystem::exists(file), "held-out corpus file " + file.string() + " (from " + corpus_json +
                                                ") does not exist: the corpus is the Debian python3.11 library");
    EditFile f;
    f.path = p.get<std::string>();
    f.text = read_text_file(file.string());
    for (size_t at = 0; at < f.text.size();) {
      const size_t end = f.text.find('\n', at);
      const size_t line_end = end == std::string::npos ? f.text.size() : end;
      size_t i = at;
      while (i < line_end && f.text[i] == ' ') ++i;
      if (f.text.compare(i, 4, "def ") == 0 && f.text.find('(', i) < line_end) f.defs.push_back(at);
      at = line_end + 1;
    }
    if (!f.defs.empty()) out.push_back(std::move(f));
  }
  DS_CHECK(!out.empty(), "no held-out file of " + corpus_json + " defines a function");
  return out;
}

AgenticEdit::AgenticEdit(AgenticEditConfig cfg, std::vector<EditFile> files) : cfg_(std::move(cfg)), files_(std::move(files)) {
  DS_CHECK(!files_.empty(), "agentic-edit: no files");
  DS_CHECK(cfg_.turns >= 1, "--edit-turns must be at least 1");
  DS_CHECK(cfg_.max_tokens >= 1, "--edit-max-tokens must be at least 1");
}

const char* AgenticEdit::system_message() {
  return "You are a coding agent working in a Python repository. You read files with tools, make the edit the user "
         "asks for, and answer with the changed code only, in full, in one ```python block.";
}

const EditFile& AgenticEdit::file_of(uint64_t session) const {
  return files_[size_t(mix64(cfg_.seed, session) % files_.size())];
}

std::string AgenticEdit::function_name(const EditFile& f, size_t def) const {
  size_t i = f.text.find("def ", def) + 4;
  const size_t j = f.text.find('(', i);
  return f.text.substr(i, j - i);
}

std::string AgenticEdit::excerpt(const EditFile& f, size_t def) const {
  // From a few lines above the function to file_chars, cut at a line end.
  size_t from = def;
  for (int lines = 0; lines < 4 && from >= 2; ++lines) {
    const size_t nl = f.text.rfind('\n', from - 2);
    from = nl == std::string::npos ? 0 : nl + 1;
  }
  std::string s = f.text.substr(from, cfg_.file_chars);
  if (from + cfg_.file_chars < f.text.size()) {
    const size_t cut = s.rfind('\n');
    if (cut != std::string::npos && cut > 0) s.resize(cut + 1);
  }
  return s;
}

std::string AgenticEdit::user_message(uint64_t session, int turn) const {
  static const char* const kTasks[] = {"add type hints to", "add a docstring to", "rename the local variables of",
                                       "handle an empty argument in", "simplify"};
  const EditFile& f = file_of(session);
  const uint64_t h = mix64(cfg_.seed ^ 0x9e3779b97f4a7c15ull, session);
  const size_t def = f.defs[size_t(h % f.defs.size())];
  const std::string name = function_name(f, def);
  if (turn == 0) {
    return std::string("Task: in ") + f.path + ", " + kTasks[(h >> 8) % 5] + " `" + name + "`.\n\nTool result (read_file " +
           f.path + "):\n```python\n" + excerpt(f, def) + "```\n\nWrite the new version of `" + name + "`:\n\n```python\ndef " + name + "(";
  }
  // Later turns: the tests fail, the agent reads the region again (or the next function).
  const size_t next = f.defs[size_t((h % f.defs.size()) + size_t(turn) / 2) % f.defs.size()];
  return std::string("Tool result (run_tests):\nFAILED tests/test_") + name + ".py::test_" + name + " - AssertionError\n" +
         "1 failed, " + std::to_string(10 + (h >> 16) % 40) + " passed\n\nTool result (read_file " + f.path + "):\n```python\n" +
         excerpt(f, next) + "```\n\nFix `" + name + "` and write it again in full:\n\n```python\ndef " + name + "(";
}

ReplayOutput AgenticEdit::run(const SenderConfig& sc, const LoadConfig& lc, const std::function<void()>& on_measure_start) const {
  const auto origin = sc.origin;
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - origin).count(); };
  std::mutex mu;
  ReplayOutput out;
  std::atomic<bool> stop{false}, interrupted{false};
  std::atomic<int64_t> measured{0};
  std::once_flag opened;
  std::atomic<double> measure_start{-1};
  auto lane = [&](int index) {
    auto client = sc.target.client(sc.timeout_s);
    int sent = 0;
    for (uint64_t k = 0; !stop.load(); ++k) {
      const uint64_t session = mix64(lc.seed, uint64_t(index) + k * uint64_t(lc.concurrency));
      json messages = json::array({{{"role", "system"}, {"content", system_message()}}});
      int64_t first_prompt = 0, next_prompt = 0;
      for (int turn = 0; turn < cfg_.turns && !stop.load(); ++turn) {
        if (turn > 0 && cfg_.context_limit > 0 && next_prompt + first_prompt + cfg_.max_tokens > cfg_.context_limit) break;
        const bool warmup = sent < lc.warmup_requests_per_lane;
        if (!warmup) {
          std::call_once(opened, [&] {
            if (on_measure_start) on_measure_start();
            measure_start.store(now_s());
          });
          if (lc.max_requests > 0 && measured.fetch_add(1) >= lc.max_requests) {
            stop.store(true);
            break;
          }
        }
        messages.push_back({{"role", "user"}, {"content", user_message(session, turn)}});
        json body = {{"model", sc.model},
                     {"messages", messages},
                     {"max_tokens", cfg_.max_tokens},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"temperature", sc.temperature ? *sc.temperature : 0.0}};
        StreamRequest req;
        req.path = sc.target.path("/v1/chat/completions");
        req.body = body.dump();
        req.timeout_s = sc.timeout_s;
        RequestRecord rec;
        rec.lane = index;
        rec.session = "edit-" + std::to_string(session);
        rec.play = session;
        rec.turn = turn;
        rec.warmup = warmup;
        rec.max_tokens = cfg_.max_tokens;
        rec.result = post_stream(*client, req, origin);
        rec.input_tokens = std::max<int64_t>(rec.result.prompt_tokens, 0);
        ++sent;
        const bool ok = rec.result.error.empty();
        if (turn == 0) first_prompt = rec.result.prompt_tokens;
        next_prompt = rec.result.prompt_tokens + std::max<int64_t>(rec.result.completion_tokens, 0);
        messages.push_back({{"role", "assistant"}, {"content", rec.result.text}});
        {
          std::lock_guard<std::mutex> lock(mu);
          out.records.push_back(std::move(rec));
        }
        const double start = measure_start.load();
        if (start >= 0 && now_s() - start >= lc.duration_s) stop.store(true);
        if (lc.interrupt && lc.interrupt->load() > 0) {
          interrupted.store(true);
          stop.store(true);
        }
        if (!ok) break;  // the session cannot go on without its reply
      }
    }
  };
  std::vector<std::thread> lanes;
  for (int i = 0; i < lc.concurrency; ++i) lanes.emplace_back(lane, i);
  for (auto& t : lanes) t.join();
  out.interrupted = interrupted.load();
  out.measure_start_s = measure_start.load();
  out.stop_s = now_s();
  return out;
}

}  // namespace ds::bench
