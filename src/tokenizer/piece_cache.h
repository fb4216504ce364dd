// Memo of piece -> ids. Text repeats the same pieces (" the", "    ", "self") endlessly, and a
// hash lookup is far cheaper than re-running the merges.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds {

class PieceCache {
 public:
  // Pieces longer than this are not kept: they are rare one-offs and would crowd out the rest.
  static constexpr std::size_t kMaxPieceBytes = 64;

  explicit PieceCache(std::size_t capacity = 1 << 17);

  // Appends the cached ids of piece to out and returns true, or returns false.
  bool lookup(std::string_view piece, std::vector<int32_t>& out) const;
  void insert(std::string_view piece, std::span<const int32_t> ids) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Sharded so that threads encoding different requests rarely wait on one lock. A full shard
  // is simply emptied: cheaper than LRU bookkeeping on every hit, and the hot pieces return
  // within a few hundred tokens.
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  static constexpr std::size_t kShards = 16;

  Shard& shard_of(std::string_view piece, std::size_t& hash) const;

  std::size_t shard_capacity_;
  mutable Shard shards_[kShards];
};

}  // namespace ds
