// Suffix drafting (--spec-method suffix; SuffixDecoding, Oliaro et al., NeurIPS 2025): draft
// tokens come from what the session already holds, with no draft model. Two kinds of trie
// (spec_decode/suffix_trie.h) are asked each round, and the proposal with the higher score wins:
//   per request  one over the request's prompt and accepted output, kept level with it as
//                tokens are accepted (O(new tokens x depth) per step), dropped at its end;
//   global       one over the outputs of requests that finished, oldest evicted first once
//                they hold more than --suffix-cache-tokens.
// An agentic turn quotes what a tool read and writes back edited code: the per-request trie
// finds it in the prompt; the global trie carries patterns (tool-call JSON, boilerplate) from
// one session's outputs to the next.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "spec_decode/spec_options.h"
#include "spec_decode/suffix_trie.h"

namespace ds {

class SuffixProposer {
 public:
  explicit SuffixProposer(const SuffixOptions& o);

  // Brings request `id`'s trie level with `tokens` (its prompt and accepted output): only the
  // tokens it has not seen are added.
  void observe(uint64_t id, std::span<const int32_t> tokens);
  // At most max_tokens draft tokens to follow `tokens`; empty when neither trie matches.
  SuffixTrie::Proposal propose(uint64_t id, std::span<const int32_t> tokens, int max_tokens);
  // The request ended: its output joins the global trie, its own trie goes.
  void retire(uint64_t id, std::span<const int32_t> output);

  int64_t global_tokens() const { return held_; }
  const SuffixTrie& global() const { return global_; }
  size_t num_requests() const { return requests_.size(); }
  size_t bytes() const;

 private:
  struct PerRequest {
    explicit PerRequest(int depth) : trie(depth) {}
    SuffixTrie trie;
    SuffixTrie::Cursor cursor;
    size_t fed = 0;
  };
  SuffixOptions o_;
  std::unordered_map<uint64_t, std::unique_ptr<PerRequest>> requests_;
  SuffixTrie global_;
  std::deque<std::vector<int32_t>> outputs_;  // what global_ holds, oldest first
  int64_t held_ = 0;
};

}  // namespace ds
