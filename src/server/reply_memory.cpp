#include "server/reply_memory.h"

#include <nlohmann/json.hpp>

namespace ds::server {

namespace {

// Arguments compared as parsed JSON: a client may send them back re-serialized (Anthropic's
// tool_use input is an object, dumped again here).
std::string canonical_arguments(const std::string& text) {
  const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  if (v.is_discarded()) return text;
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string ReplyMemory::key_of(const std::string& content,
                                const std::vector<std::pair<std::string, std::string>>& calls) {
  // Lengths before each part, so no content can forge another reply's key.
  std::string key = std::to_string(content.size()) + ":" + content;
  for (const auto& [name, arguments] : calls) {
    const std::string a = canonical_arguments(arguments);
    key += "|" + std::to_string(name.size()) + ":" + name + std::to_string(a.size()) + ":" + a;
  }
  return key;
}

void ReplyMemory::remember(const std::string& content, const std::vector<ToolCall>& calls, std::vector<int32_t> ids,
                           std::string text) {
  if (max_bytes_ == 0 || ids.empty()) return;
  std::vector<std::pair<std::string, std::string>> named;
  for (const ToolCall& c : calls) named.emplace_back(c.name, c.arguments);
  Entry e{key_of(content, named), std::move(ids), std::move(text)};
  if (e.bytes() > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_key_.find(e.key); it != by_key_.end()) {
    bytes_ -= it->second->bytes();
    lru_.erase(it->second);
    by_key_.erase(it);
  }
  bytes_ += e.bytes();
  lru_.push_front(std::move(e));
  by_key_[lru_.front().key] = lru_.begin();
  evict_locked();
}

int ReplyMemory::recall(std::vector<ChatTurn>& turns) {
  if (max_bytes_ == 0) return 0;
  int found = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (lru_.empty()) return 0;
  for (ChatTurn& t : turns) {
    if (t.role != "assistant") continue;
    std::vector<std::pair<std::string, std::string>> named;
    for (const ChatToolCall& c : t.tool_calls) named.emplace_back(c.name, c.arguments);
    auto it = by_key_.find(key_of(t.content, named));
    if (it == by_key_.end()) continue;
    lru_.splice(lru_.begin(), lru_, it->second);
    t.generated_ids = it->second->ids;
    t.generated_text = it->second->text;
    ++found;
  }
  return found;
}

void ReplyMemory::evict_locked() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes();
    by_key_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t ReplyMemory::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ReplyMemory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace ds::server
