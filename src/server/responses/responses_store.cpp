#include "server/responses/responses_store.h"

#include "server/json_text.h"

namespace ds::server {

namespace {
constexpr size_t kTurnOverhead = 64;  // the strings' and vectors' own bookkeeping, roughly
}

size_t ResponsesStore::size_of(const StoredResponse& r) {
  size_t n = dump_json(r.response).size();
  for (const ChatTurn& t : r.conversation) {
    n += kTurnOverhead + t.role.size() + t.content.size() + t.tool_call_id.size() + t.name.size();
    for (const ChatToolCall& c : t.tool_calls) n += kTurnOverhead + c.id.size() + c.name.size() + c.arguments.size();
  }
  return n;
}

void ResponsesStore::drop(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes;
  by_id_.erase(it->id);
  lru_.erase(it);
}

bool ResponsesStore::put(const std::string& id, StoredResponse r) {
  const size_t n = size_of(r);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) drop(it->second);
  if (max_count_ == 0 || n > max_bytes_) return false;
  lru_.push_front(Entry{id, std::make_shared<const StoredResponse>(std::move(r)), n});
  by_id_[id] = lru_.begin();
  bytes_ += n;
  while (lru_.size() > max_count_ || bytes_ > max_bytes_) drop(std::prev(lru_.end()));
  return true;
}

std::shared_ptr<const StoredResponse> ResponsesStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponsesStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  drop(it->second);
  return true;
}

size_t ResponsesStore::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponsesStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ds::server
