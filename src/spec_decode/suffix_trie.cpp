#include "spec_decode/suffix_trie.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ds {

SuffixTrie::SuffixTrie(int max_depth) : max_depth_(max_depth) {
  DS_CHECK(max_depth >= 1 && max_depth <= 1024, "suffix trie depth " + std::to_string(max_depth) + " is outside [1, 1024]");
  nodes_.emplace_back();
}

int32_t SuffixTrie::find(int32_t parent, int32_t token) const {
  const auto it = edges_.find(key(parent, token));
  return it == edges_.end() ? -1 : it->second;
}

int32_t SuffixTrie::child_or_new(int32_t parent, int32_t token) {
  auto [it, fresh] = edges_.try_emplace(key(parent, token), -1);
  if (!fresh) return it->second;
  int32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
    nodes_[size_t(n)] = Node{};
  } else {
    n = int32_t(nodes_.size());
    nodes_.emplace_back();
  }
  Node& c = nodes_[size_t(n)];
  Node& p = nodes_[size_t(parent)];
  c.token = token;
  c.parent = parent;
  c.depth = int16_t(p.depth + 1);
  c.next_sibling = p.first_child;
  p.first_child = n;
  it->second = n;
  return n;
}

void SuffixTrie::append(Cursor& c, int32_t token) {
  // Each suffix that ends at the previous token, extended by `token`, plus `token` alone. In
  // place, deepest first, so each entry is read before it is overwritten; a suffix already at
  // max_depth drops out.
  ++clock_;
  auto bump = [&](int32_t parent) {
    const int32_t n = child_or_new(parent, token);
    nodes_[size_t(n)].count += 1;
    nodes_[size_t(n)].stamp = clock_;
    nodes_[size_t(parent)].child_total += 1;
    return n;
  };
  std::vector<int32_t>& a = c.active;
  if (!a.empty() && nodes_[size_t(a.back())].depth >= max_depth_) a.pop_back();
  a.push_back(0);
  for (size_t i = a.size() - 1; i > 0; --i) a[i] = bump(a[i - 1]);
  a[0] = bump(0);
}

void SuffixTrie::insert(std::span<const int32_t> stream) {
  Cursor c;
  for (int32_t t : stream) append(c, t);
}

void SuffixTrie::erase(std::span<const int32_t> stream) {
  // The same walk as insert, taking counts back. A node at zero may still be the parent of a
  // later step's node, so the freeing waits for the end, children before parents.
  std::vector<int32_t> a, zero;
  for (int32_t t : stream) {
    if (!a.empty() && nodes_[size_t(a.back())].depth >= max_depth_) a.pop_back();
    a.push_back(0);
    for (size_t i = a.size(); i-- > 0;) {
      const int32_t parent = i == 0 ? 0 : a[i - 1];
      const int32_t n = find(parent, t);
      DS_CHECK(n >= 0, "suffix trie: erase of a stream that was not inserted");
      Node& node = nodes_[size_t(n)];
      node.count -= 1;
      nodes_[size_t(parent)].child_total -= 1;
      if (node.count == 0) zero.push_back(n);
      a[i] = n;
    }
  }
  std::sort(zero.begin(), zero.end(), [&](int32_t x, int32_t y) { return nodes_[size_t(x)].depth > nodes_[size_t(y)].depth; });
  for (int32_t n : zero) free_node(n);
}

void SuffixTrie::free_node(int32_t n) {
  Node& node = nodes_[size_t(n)];
  Node& p = nodes_[size_t(node.parent)];
  // Unlink from the parent's list of children.
  if (p.first_child == n) {
    p.first_child = node.next_sibling;
  } else {
    int32_t s = p.first_child;
    while (nodes_[size_t(s)].next_sibling != n) s = nodes_[size_t(s)].next_sibling;
    nodes_[size_t(s)].next_sibling = node.next_sibling;
  }
  edges_.erase(key(node.parent, node.token));
  node = Node{};
  node.parent = -2;  // freed
  free_.push_back(n);
}

int32_t SuffixTrie::walk(std::span<const int32_t> context, int m) const {
  int32_t n = 0;
  for (size_t i = context.size() - size_t(m); i < context.size() && n >= 0; ++i) n = find(n, context[i]);
  return n;
}

SuffixTrie::Proposal SuffixTrie::follow(int32_t node, int match_length, int max_tokens, double spec_factor,
                                        double min_prob) const {
  Proposal p;
  p.match_length = match_length;
  const int limit = std::min(max_tokens, int(std::ceil(spec_factor * double(match_length))));
  double prob = 1.0;
  int32_t cur = node;
  while (int(p.tokens.size()) < limit && nodes_[size_t(cur)].child_total > 0) {
    int32_t best = -1;
    for (int32_t c = nodes_[size_t(cur)].first_child; c >= 0; c = nodes_[size_t(c)].next_sibling) {
      const Node& x = nodes_[size_t(c)];
      if (best < 0 || x.count > nodes_[size_t(best)].count ||
          (x.count == nodes_[size_t(best)].count && x.stamp > nodes_[size_t(best)].stamp))
        best = c;
    }
    prob *= double(nodes_[size_t(best)].count) / double(nodes_[size_t(cur)].child_total);
    if (prob < min_prob) break;
    p.tokens.push_back(nodes_[size_t(best)].token);
    p.probs.push_back(float(prob));
    p.score += prob;
    cur = best;
  }
  return p;
}

SuffixTrie::Proposal SuffixTrie::propose(std::span<const int32_t> context, int max_match, int max_tokens,
                                         double spec_factor, double min_prob) const {
  // A suffix that occurs implies every shorter one does: binary search the longest, then step
  // down to the deepest that has a continuation.
  int lo = 0, hi = std::min({int(context.size()), max_match, max_depth_});
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (walk(context, mid) >= 0)
      lo = mid;
    else
      hi = mid - 1;
  }
  for (int m = lo; m >= 1; --m) {
    const int32_t n = walk(context, m);
    if (nodes_[size_t(n)].child_total > 0) return follow(n, m, max_tokens, spec_factor, min_prob);
  }
  return {};
}

SuffixTrie::Proposal SuffixTrie::propose(const Cursor& c, int max_match, int max_tokens, double spec_factor,
                                         double min_prob) const {
  for (size_t i = c.active.size(); i-- > 0;) {
    const int32_t n = c.active[i];
    const int depth = nodes_[size_t(n)].depth;
    if (depth > max_match) continue;
    if (nodes_[size_t(n)].child_total > 0) return follow(n, depth, max_tokens, spec_factor, min_prob);
  }
  return {};
}

int64_t SuffixTrie::count(std::span<const int32_t> pattern) const {
  if (pattern.empty() || int(pattern.size()) > max_depth_) return 0;
  const int32_t n = walk(pattern, int(pattern.size()));
  return n < 0 ? 0 : nodes_[size_t(n)].count;
}

size_t SuffixTrie::bytes() const {
  // An unordered_map entry: key, value, next pointer and cached hash, plus a bucket pointer.
  const size_t edge = sizeof(uint64_t) + sizeof(int32_t) + 2 * sizeof(void*) + sizeof(size_t);
  return nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(int32_t) + edges_.size() * edge +
         edges_.bucket_count() * sizeof(void*);
}

}  // namespace ds
