#include "grammar/token_vocabulary.h"

#include <algorithm>

namespace ds::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
  // Sorting the ids by their bytes makes every trie node's subtree a contiguous run, so the
  // trie is built in one pass and each node's edges are contiguous.
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < int32_t(bytes_.size()); ++i)
    if (!bytes_[size_t(i)].empty()) ids.push_back(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // Build recursively over [lo, hi) of ids sharing the first `depth` bytes.
  struct Range {
    size_t lo, hi, depth;
    uint32_t node;
  };
  nodes_.emplace_back();
  std::vector<Range> work{{0, ids.size(), 0, 0}};
  while (!work.empty()) {
    const Range r = work.back();
    work.pop_back();
    size_t i = r.lo;
    nodes_[r.node].first_token = uint32_t(tokens_.size());
    while (i < r.hi && bytes_[size_t(ids[i])].size() == r.depth) tokens_.push_back(ids[i++]);
    nodes_[r.node].num_tokens = uint32_t(tokens_.size()) - nodes_[r.node].first_token;
    nodes_[r.node].first_edge = uint32_t(edges_.size());
    std::vector<Range> kids;
    while (i < r.hi) {
      const uint8_t b = uint8_t(bytes_[size_t(ids[i])][r.depth]);
      size_t j = i;
      while (j < r.hi && uint8_t(bytes_[size_t(ids[j])][r.depth]) == b) ++j;
      const uint32_t child = uint32_t(nodes_.size());
      nodes_.emplace_back();
      edges_.push_back(Edge{b, child});
      kids.push_back(Range{i, j, r.depth + 1, child});
      i = j;
    }
    nodes_[r.node].num_edges = uint32_t(edges_.size()) - nodes_[r.node].first_edge;
    work.insert(work.end(), kids.begin(), kids.end());
  }
}

}  // namespace ds::grammar
