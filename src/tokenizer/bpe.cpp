#include "tokenizer/bpe.h"

#include <algorithm>

namespace ds {

BpeModel::BpeModel(std::array<int32_t, 256> byte_ids, const std::vector<BpeMerge>& merges,
                   std::unordered_map<std::string, int32_t> whole_words)
    : byte_ids_(byte_ids), whole_words_(std::move(whole_words)) {
  ranks_.reserve(merges.size() * 2);
  for (std::size_t i = 0; i < merges.size(); ++i) {
    ranks_.try_emplace(key(merges[i].left, merges[i].right), Rule{static_cast<int32_t>(i), merges[i].result});
  }
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;  // -1 at the ends
  bool alive;
};

struct Candidate {
  int32_t rank, pos, left, right, result;
  // std::*_heap builds a max-heap, so "less" means "applied later".
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  if (!whole_words_.empty()) {
    auto it = whole_words_.find(std::string(bytes));
    if (it != whole_words_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Reused across calls: encode runs per piece and the allocations would dominate short ones.
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  const auto n = static_cast<int32_t>(bytes.size());
  syms.resize(static_cast<std::size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    syms[i] = {byte_ids_[static_cast<unsigned char>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  auto consider = [&](int32_t pos) {
    const int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = ranks_.find(key(syms[pos].id, syms[nx].id));
    if (it == ranks_.end()) return;
    heap.push_back({it->second.rank, pos, syms[pos].id, syms[nx].id, it->second.result});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& s = syms[c.pos];
    // Entries are never removed when a neighbour changes; they are checked here instead.
    if (!s.alive || s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;
    Symbol& r = syms[s.next];
    s.id = c.result;
    r.alive = false;
    s.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  // One huge piece (a long run the pre-tokenizer cannot split) must not pin its scratch for the
  // thread's life.
  if (syms.capacity() > (1u << 14)) std::vector<Symbol>().swap(syms);
  if (heap.capacity() > (1u << 14)) std::vector<Candidate>().swap(heap);
}

}  // namespace ds
