// A depth-bounded suffix trie over token streams: every substring of length <= max_depth of
// every stream inserted is a path from the root, and each node counts the occurrences of its
// substring. It is what suffix drafting (SuffixDecoding, Oliaro et al., NeurIPS 2025) queries:
// find the longest suffix of a sequence's context that occurred before, then follow the most
// frequent continuation while its estimated probability stays high.
//
// Streams are appended one token at a time through a Cursor (the nodes of the stream's
// suffixes that end at its last token, at most max_depth of them), so an update costs
// O(max_depth) per token whatever the stream's length. A stream inserted whole can be erased
// whole again (its counts taken back, nodes left at zero freed), which is how the global cache
// of recent outputs stays within its token budget. Memory: at most 1 + max_depth x (tokens
// held) nodes.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ds {

class SuffixTrie {
 public:
  explicit SuffixTrie(int max_depth);

  // The stream's suffixes that end at its last token, shortest first (depths 1, 2, ...).
  struct Cursor {
    std::vector<int32_t> active;
  };
  void append(Cursor& c, int32_t token);
  void insert(std::span<const int32_t> stream);
  // Takes back exactly what insert(stream) added.
  void erase(std::span<const int32_t> stream);

  // A continuation of a matched context, and how likely the trie thinks it is.
  struct Proposal {
    std::vector<int32_t> tokens;
    std::vector<float> probs;  // cumulative: the estimated chance tokens [0, i] all hold
    int match_length = 0;      // context tokens the proposal continues
    double score = 0;          // sum of probs: the expected number of accepted tokens
  };
  // The deepest suffix of `context` of length <= max_match that has a continuation, followed
  // greedily (the most frequent child, ties to the most recently seen) for at most
  // ceil(spec_factor x match length) and max_tokens tokens, while the cumulative probability
  // (child count over the children's total, per step) stays >= min_prob.
  Proposal propose(std::span<const int32_t> context, int max_match, int max_tokens, double spec_factor,
                   double min_prob) const;
  // The same from a cursor's matches (the stream is the context): no walk from the root.
  Proposal propose(const Cursor& c, int max_match, int max_tokens, double spec_factor, double min_prob) const;

  // Occurrences of `pattern` (length 1..max_depth) in the streams held; 0 when absent.
  int64_t count(std::span<const int32_t> pattern) const;
  size_t num_nodes() const { return nodes_.size() - free_.size(); }
  int max_depth() const { return max_depth_; }
  // Bytes the nodes and edges take (an estimate from their sizes), for the memory bound.
  size_t bytes() const;

 private:
  struct Node {
    int32_t count = 0;
    int32_t child_total = 0;  // sum of the children's counts: the denominator of a step's chance
    int32_t token = 0;
    int32_t parent = -1;
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    uint32_t stamp = 0;  // last time it was counted (ties go to the most recent)
    int16_t depth = 0;
  };
  static uint64_t key(int32_t parent, int32_t token) { return (uint64_t(uint32_t(parent)) << 32) | uint32_t(token); }
  int32_t find(int32_t parent, int32_t token) const;
  int32_t child_or_new(int32_t parent, int32_t token);
  void free_node(int32_t n);
  // The node of context's suffix of length m, or -1.
  int32_t walk(std::span<const int32_t> context, int m) const;
  Proposal follow(int32_t node, int match_length, int max_tokens, double spec_factor, double min_prob) const;

  int max_depth_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, int32_t> edges_;
  uint32_t clock_ = 0;
};

}  // namespace ds
