#include "spec_decode/suffix_proposer.h"

#include <algorithm>

namespace ds {

SuffixProposer::SuffixProposer(const SuffixOptions& o) : o_(o), global_(o.max_depth) {}

void SuffixProposer::observe(uint64_t id, std::span<const int32_t> tokens) {
  auto& r = requests_[id];
  if (!r) r = std::make_unique<PerRequest>(o_.max_depth);
  for (; r->fed < tokens.size(); ++r->fed) r->trie.append(r->cursor, tokens[r->fed]);
}

SuffixTrie::Proposal SuffixProposer::propose(uint64_t id, std::span<const int32_t> tokens, int max_tokens) {
  if (max_tokens <= 0) return {};
  // The matched pattern and its continuation share the depth bound: leave room for a full
  // proposal, but never match on fewer than half the depth.
  const int max_match = std::max(o_.max_depth / 2, o_.max_depth - max_tokens);
  SuffixTrie::Proposal best;
  const auto it = requests_.find(id);
  if (it != requests_.end() && it->second->fed == tokens.size())
    best = it->second->trie.propose(it->second->cursor, max_match, max_tokens, o_.spec_factor, o_.min_prob);
  if (held_ > 0) {
    SuffixTrie::Proposal g = global_.propose(tokens, max_match, max_tokens, o_.spec_factor, o_.min_prob);
    if (g.score > best.score) best = std::move(g);
  }
  return best;
}

void SuffixProposer::retire(uint64_t id, std::span<const int32_t> output) {
  requests_.erase(id);
  if (o_.cache_tokens <= 0 || output.empty()) return;
  // An output longer than the whole budget keeps its most recent tokens.
  if (int64_t(output.size()) > o_.cache_tokens) output = output.subspan(output.size() - size_t(o_.cache_tokens));
  outputs_.emplace_back(output.begin(), output.end());
  global_.insert(outputs_.back());
  held_ += int64_t(output.size());
  while (held_ > o_.cache_tokens) {
    global_.erase(outputs_.front());
    held_ -= int64_t(outputs_.front().size());
    outputs_.pop_front();
  }
}

size_t SuffixProposer::bytes() const {
  size_t b = global_.bytes();
  for (const auto& [id, r] : requests_) b += r->trie.bytes();
  return b;
}

}  // namespace ds
