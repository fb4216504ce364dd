#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace ds::grammar {

namespace {
// Deeper stacks than this are dropped: no JSON schema a client sends nests this far, and it
// bounds the expansion of a (never built) nullable loop.
constexpr uint32_t kMaxDepth = 4096;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}
}  // namespace

Matcher::Matcher(const Grammar& g)
    : g_(g), max_heads_(std::max<size_t>(g.limits().max_state_heads, 1)), max_nodes_(64 * max_heads_ + 4096) {
  DS_CHECK(g.finished(), "grammar: the matcher needs a finished grammar");
  sym_ = g.symbols().data();
  sets_ = g.byte_sets().data();
  nodes_.reserve(1024);
  size_t slots = 16;
  while (slots < 2 * max_heads_) slots *= 2;
  seen_.assign(slots, {0, 0});
}

int32_t Matcher::push(uint32_t pos, int32_t parent) {
  const uint32_t depth = parent < 0 ? 1 : nodes_[size_t(parent)].depth + 1;
  nodes_.push_back(Node{pos, parent, mix(hash_of(parent), pos), depth});
  return int32_t(nodes_.size() - 1);
}

bool Matcher::same_chain(int32_t a, int32_t b) const {
  while (a >= 0 && b >= 0) {
    if (a == b) return true;
    const Node &x = nodes_[size_t(a)], &y = nodes_[size_t(b)];
    if (x.pos != y.pos || x.hash != y.hash) return false;
    a = x.parent;
    b = y.parent;
  }
  return a == b;
}

void Matcher::expand(int32_t head, std::vector<int32_t>* out, size_t first) {
  // Follow End (pop) and Rule (push each alternative) until every stack's top is a byte class.
  // Alternatives wait in pending_ (an explicit stack, so a long chain of rules that each start
  // with another costs no C++ stack), taken in their order: the first is followed at once.
  const size_t base = pending_.size();
  while (true) {
    if (overflowed_) break;
    if (head >= 0 && nodes_[size_t(head)].depth > kMaxDepth) {
      head = next_pending(base);
      if (head == kNone) break;
      continue;
    }
    if (nodes_.size() - step_mark_ > max_nodes_ || out->size() - first >= max_heads_) {
      overflowed_ = true;
      break;
    }
    if (head < 0 || sym_[nodes_[size_t(head)].pos].kind == Symbol::Bytes) {
      if (!seen_before(head)) out->push_back(head);
      head = next_pending(base);
      if (head == kNone) break;
      continue;
    }
    const Node n = nodes_[size_t(head)];
    const FlatSymbol& s = sym_[n.pos];
    if (s.kind == Symbol::End) {
      head = n.parent;  // the parent already points past the rule it called
      continue;
    }
    // A call in tail position returns straight to the caller's caller: without this, right
    // recursion (every star and repeat) would deepen the stack by one per byte, and no two
    // states inside a string would ever share a cache key.
    const int32_t ret = sym_[n.pos + 1].kind == Symbol::End ? n.parent : push(n.pos + 1, n.parent);
    const auto& alts = g_.alternatives(s.arg);
    for (size_t i = alts.size(); i-- > 1;) pending_.push_back({alts[i], ret});
    head = push(alts[0], ret);
  }
  pending_.resize(base);
}

bool Matcher::seen_before(int32_t head) {
  // Open addressing over the heads found since begin_step(), stamped so that a step starts with
  // an empty table without clearing it. At most max_heads_ entries in twice as many slots.
  const uint64_t h = hash_of(head);
  const size_t mask = seen_.size() - 1;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    auto& [stamp, other] = seen_[i];
    if (stamp != stamp_) {
      stamp = stamp_;
      other = head;
      return false;
    }
    if (hash_of(other) == h && same_chain(other, head)) return true;
  }
}

void Matcher::begin_step() {
  step_mark_ = nodes_.size();
  overflowed_ = false;
  if (++stamp_ == 0) {  // wrapped: stale stamps could read as current
    for (auto& e : seen_) e.first = 0;
    stamp_ = 1;
  }
}

int32_t Matcher::next_pending(size_t base) {
  if (pending_.size() == base) return kNone;
  const auto [pos, parent] = pending_.back();
  pending_.pop_back();
  return push(pos, parent);
}

void Matcher::initial(std::vector<int32_t>* heads) {
  heads->clear();
  nodes_.clear();
  begin_step();
  // A one-symbol sequence calling the root: a node at a Rule symbol. The grammar's flat form has
  // no such symbol of its own, so start from each of the root's alternatives directly.
  const auto& alts = g_.alternatives(g_.root());
  for (uint32_t a : alts) expand(push(a, kAccepted), heads, 0);
  if (overflowed_) heads->clear();
}

bool Matcher::advance(const int32_t* heads, size_t n, uint8_t byte, std::vector<int32_t>* out) {
  const size_t first = out->size();
  begin_step();
  for (size_t i = 0; i < n && !overflowed_; ++i) {
    const int32_t h = heads[i];
    if (h < 0) continue;
    const Node node = nodes_[size_t(h)];
    if (!sets_[sym_[node.pos].arg].has(byte)) continue;
    expand(push(node.pos + 1, node.parent), out, first);
  }
  if (overflowed_) {
    out->resize(first);
    nodes_.resize(step_mark_);
    return false;
  }
  return out->size() > first;
}

ByteSet Matcher::next_bytes(const int32_t* heads, size_t n) const {
  ByteSet s;
  for (size_t i = 0; i < n; ++i)
    if (heads[i] >= 0) s = s | sets_[sym_[nodes_[size_t(heads[i])].pos].arg];
  return s;
}

std::string Matcher::key(const int32_t* heads, size_t n) const {
  // Heads in hash order, each as its chain of positions, so equal sets of stacks give equal keys
  // whatever order they were found in.
  std::vector<int32_t> order(heads, heads + n);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return hash_of(a) < hash_of(b); });
  std::string k;
  for (int32_t h : order) {
    for (int32_t x = h; x >= 0; x = nodes_[size_t(x)].parent) {
      const uint32_t p = nodes_[size_t(x)].pos;
      k.append(reinterpret_cast<const char*>(&p), sizeof p);
    }
    const uint32_t sep = 0xffffffffu;
    k.append(reinterpret_cast<const char*>(&sep), sizeof sep);
  }
  return k;
}

void Matcher::from_key(std::string_view key, std::vector<int32_t>* heads) {
  heads->clear();
  std::vector<uint32_t> chain;
  for (size_t at = 0; at + sizeof(uint32_t) <= key.size(); at += sizeof(uint32_t)) {
    uint32_t p;
    std::memcpy(&p, key.data() + at, sizeof p);
    if (p != 0xffffffffu) {
      chain.push_back(p);
      continue;
    }
    // A chain lists its positions top first: push from the bottom.
    int32_t h = kAccepted;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) h = push(*it, h);
    heads->push_back(h);
    chain.clear();
  }
}

}  // namespace ds::grammar
