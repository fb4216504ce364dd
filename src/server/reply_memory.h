// Replies this server generated, kept by what their client was given (the content text and the
// calls), with the token ids the model wrote them as.
//
// Why: an agent sends its whole history back every turn, and the server re-tokenizes it. A
// sampled reply is rarely the tokenizer's own split of its text (measured on the bundled model:
// 4 replies of 4 differ from their re-tokenization within 28 to 66 tokens), and the calls come
// back rendered by the template, not as the model wrote them. So the next turn's prompt leaves
// the prefix cache at the start of the previous reply, and an agent whose replies are long
// re-reads them every turn. When a client sends a reply back unchanged, the prompt carries the
// reply's own ids instead (tokenizer/chat_template.h, ChatMessage::generated_ids): the same text
// the model wrote, as it wrote it, and the cache reaches through it.
//
// What counts as unchanged: the same content, byte for byte, and the same calls in order, each
// the same name and the same arguments (compared as parsed JSON, so a client that re-serializes
// them still matches). Call ids are not compared: chat templates key results by them, not the
// reply's text. A reply cut by a stop string or with a dropped call is not kept (its ids hold
// text the client never saw).
//
// A prompt thus depends on whether the server still remembers a reply (`serve
// --reply-memory-mb 0` turns it off): after a restart or an eviction the same conversation is
// re-tokenized as a client-side server would. Bounded by bytes, least recently used first out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/generation_request.h"
#include "server/tools/tool_parser.h"

namespace ds::server {

class ReplyMemory {
 public:
  explicit ReplyMemory(size_t max_bytes) : max_bytes_(max_bytes) {}

  // `ids`: the reply's tokens without the end-of-turn token that ended it; `text` what they
  // decode to.
  void remember(const std::string& content, const std::vector<ToolCall>& calls, std::vector<int32_t> ids,
                std::string text);
  // Fills generated_ids / generated_text of every assistant turn that is a remembered reply.
  // Returns how many were found.
  int recall(std::vector<ChatTurn>& turns);

  size_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    std::string key;
    std::vector<int32_t> ids;
    std::string text;
    size_t bytes() const { return key.size() + text.size() + ids.size() * sizeof(int32_t) + 64; }
  };

  static std::string key_of(const std::string& content, const std::vector<std::pair<std::string, std::string>>& calls);
  void evict_locked();

  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
  size_t bytes_ = 0;
};

}  // namespace ds::server
