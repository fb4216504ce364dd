// `--synthetic agentic-edit`: closed-loop coding-agent sessions in real text, for measuring
// speculation on what a model really writes (no ignore_eos filler). Each session edits one real
// source file from the held-out part of the training corpus (tools/train/corpus.json: files the
// bundled models never saw):
//   system     a coding agent's instructions;
//   turn 0     the task (an edit to one function) and the file read by a tool;
//   turn t     a test failure naming the function and the region read again, asking for the
//              function in full once more;
// each user message ends by opening the code block with the function's `def name(`, as agent
// prompts that pin the answer's form do (and the bundled code models, not chat-tuned, then
// write code rather than comment lines);
// each turn resends the whole history as chat messages, the model's own earlier replies
// included, so the prompt grows turn by turn as an agent's does. Replies are sampled as the
// server is asked (temperature 0 unless --temperature) and end at the model's end token or
// --edit-max-tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/lanes.h"
#include "bench/openai_sender.h"

namespace ds::bench {

struct AgenticEditConfig {
  std::string corpus = "tools/train/corpus.json";  // names the root and the held-out files
  int turns = 4;                  // requests per session
  int64_t max_tokens = 256;       // per reply
  size_t file_chars = 1600;       // the excerpt a read_file tool result carries
  uint64_t seed = 1;
  // The server's max_model_len (0: unknown). A session ends early, as an agent would compact,
  // when its next turn might not fit: last prompt + reply + turn 0's whole prompt + max_tokens.
  int64_t context_limit = 0;
};

struct EditFile {
  std::string path;  // relative to the corpus root
  std::string text;
  std::vector<size_t> defs;  // offsets of the lines that start a function (`def name(`)
};

// The held-out files that hold at least one function. Throws ds::Error naming a missing corpus
// file or root.
std::vector<EditFile> load_edit_files(const std::string& corpus_json);

class AgenticEdit {
 public:
  AgenticEdit(AgenticEditConfig cfg, std::vector<EditFile> files);
  // The user message that opens turn `turn` of session `session` (a pure function of both).
  std::string user_message(uint64_t session, int turn) const;
  static const char* system_message();
  // Runs `lc.concurrency` lanes of sessions against the server until lc.duration_s of
  // measurement (or lc.max_requests) has passed; each lane's first lc.warmup_requests_per_lane
  // requests are not measured. Blocks.
  ReplayOutput run(const SenderConfig& sc, const LoadConfig& lc, const std::function<void()>& on_measure_start) const;
  size_t num_files() const { return files_.size(); }
  const AgenticEditConfig& config() const { return cfg_; }

 private:
  const EditFile& file_of(uint64_t session) const;
  std::string function_name(const EditFile& f, size_t def) const;
  std::string excerpt(const EditFile& f, size_t def) const;

  AgenticEditConfig cfg_;
  std::vector<EditFile> files_;
};

}  // namespace ds::bench
