#include "cache/state_snapshots.h"

#include <algorithm>

#include "core/error.h"

namespace ds {

StateSnapshots::StateSnapshots(int capacity, size_t state_bytes)
    : capacity_(state_bytes == 0 ? 0 : capacity), state_bytes_(state_bytes) {
  DS_CHECK(capacity >= 0, "state snapshots: negative capacity " + std::to_string(capacity));
  data_.reset(new std::byte[std::max<size_t>(1, size_t(capacity_) * state_bytes_)]);
  entries_.resize(size_t(capacity_));
  free_.reserve(size_t(capacity_));
  by_hash_.reserve(size_t(capacity_));
  for (int i = capacity_ - 1; i >= 0; --i) free_.push_back(i);
}

void StateSnapshots::unlink(int32_t i) {
  Entry& e = entries_[size_t(i)];
  if (e.prev >= 0) entries_[size_t(e.prev)].next = e.next;
  else head_ = e.next;
  if (e.next >= 0) entries_[size_t(e.next)].prev = e.prev;
  else tail_ = e.prev;
  e.prev = e.next = -1;
}

void StateSnapshots::link_back(int32_t i) {
  Entry& e = entries_[size_t(i)];
  e.prev = tail_;
  e.next = -1;
  if (tail_ >= 0) entries_[size_t(tail_)].next = i;
  else head_ = i;
  tail_ = i;
}

const void* StateSnapshots::find(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return nullptr;
  unlink(it->second);
  link_back(it->second);
  return buffer(it->second);
}

void* StateSnapshots::insert(uint64_t hash) {
  if (capacity_ == 0) return nullptr;
  int32_t i;
  if (auto it = by_hash_.find(hash); it != by_hash_.end()) {
    i = it->second;
    unlink(i);
  } else {
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = head_;
      unlink(i);
      if (evict_hook_) evict_hook_(entries_[size_t(i)].hash, buffer(i));
      by_hash_.erase(entries_[size_t(i)].hash);
      ++evictions_;
    }
    entries_[size_t(i)].hash = hash;
    by_hash_.emplace(hash, i);
  }
  link_back(i);
  return buffer(i);
}

void StateSnapshots::erase(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return;
  const int32_t i = it->second;
  by_hash_.erase(it);
  unlink(i);
  free_.push_back(i);
}

}  // namespace ds
