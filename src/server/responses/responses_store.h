// The past responses /v1/responses keeps (store: true, the default) for previous_response_id and
// GET / DELETE /v1/responses/{id}: in memory only, bounded by a count and by bytes, the least
// recently used dropped first. Each entry holds the response object as the client got it, and
// the conversation it ended as the chat template takes it: the earlier responses' turns it
// continued (its own previous_response_id chain), its input's turns, and its output as one
// assistant turn with its calls. A request's `instructions` are not part of it: as OpenAI's API
// says, a continuation does not carry the previous instructions over.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/generation_request.h"

namespace ds::server {

struct StoredResponse {
  nlohmann::json response;           // the response object, as GET returns it
  std::vector<ChatTurn> conversation;  // what a continuation prepends to its input
};

class ResponsesStore {
 public:
  ResponsesStore(size_t max_count, size_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

  // Keeps `r` under `id` (replacing one there), then drops the least recently used entries until
  // both bounds hold. An entry larger than the byte bound on its own is not kept (false).
  bool put(const std::string& id, StoredResponse r);
  // The entry (shared and never changed: a later put under the same id replaces it), which
  // becomes the most recently used; null when unknown.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  bool erase(const std::string& id);

  size_t count() const;
  size_t bytes() const;
  size_t max_count() const { return max_count_; }
  size_t max_bytes() const { return max_bytes_; }

  // What an entry is counted as: its response's JSON text and its turns' text, plus a fixed
  // overhead per turn and call.
  static size_t size_of(const StoredResponse& r);

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const StoredResponse> value;
    size_t bytes = 0;
  };
  void drop(std::list<Entry>::iterator it);

  const size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
};

}  // namespace ds::server
