#include "tokenizer/piece_cache.h"

namespace ds {

PieceCache::PieceCache(std::size_t capacity) : shard_capacity_(capacity / kShards + 1) {}

PieceCache::Shard& PieceCache::shard_of(std::string_view piece, std::size_t& hash) const {
  hash = Hash{}(piece);
  // The low bits pick the bucket inside the map; use high ones for the shard.
  return shards_[(hash >> 48) % kShards];
}

bool PieceCache::lookup(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kMaxPieceBytes) return false;
  std::size_t h;
  Shard& s = shard_of(piece, h);
  std::lock_guard lock(s.mu);
  auto it = s.map.find(piece);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::insert(std::string_view piece, std::span<const int32_t> ids) const {
  if (piece.size() > kMaxPieceBytes) return;
  std::size_t h;
  Shard& s = shard_of(piece, h);
  std::lock_guard lock(s.mu);
  if (s.map.size() >= shard_capacity_) s.map.clear();
  s.map.try_emplace(std::string(piece), ids.begin(), ids.end());
}

}  // namespace ds
