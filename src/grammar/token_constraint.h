// Grammar-constrained decoding: which tokens may come next, as a bit mask over the vocabulary.
//
// A CompiledGrammar (the grammar, the vocabulary, a cache of masks) is built once per distinct
// schema or tool set and shared by every request that uses it; a TokenConstraint is one
// request's place in it. The mask for a state is computed by walking the vocabulary's trie with
// the matcher (a token is allowed when all of its bytes advance the state), then cached under
// the state's key: a JSON document revisits few distinct states (inside a string, between
// properties), so after the first request most steps are a lookup.
//
// Thread use: a TokenConstraint belongs to the engine thread. The shared mask cache takes a
// mutex, so constraints of one grammar may be stepped from any threads.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace ds::grammar {

class CompiledGrammar {
 public:
  // `g` is finished here if it is not yet.
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes = 64u << 20);

  const Grammar& grammar() const { return g_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }

  // The cached mask for a state key, or null.
  std::shared_ptr<const std::vector<uint64_t>> find(const std::string& key);
  void store(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> mask);
  size_t cached_masks();

 private:
  Grammar g_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t cache_limit_;  // masks kept at most (from cache_bytes); the cache is cleared when full
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> cache_;
};

class TokenConstraint {
 public:
  explicit TokenConstraint(std::shared_ptr<CompiledGrammar> g);

  // Tokens that may come next (one bit per id, 64 per word), not counting end tokens: those
  // are for the caller to allow when complete(). Valid until the next accept().
  const std::vector<uint64_t>& allowed();
  bool allows(int32_t token) { return (allowed()[size_t(token) >> 6] >> (token & 63)) & 1; }
  // The output so far is a whole sentence of the grammar (an end token may come now).
  bool complete() const;
  // Some text token may come next.
  bool can_continue();
  // Advances past `token`. False (and no change) when the token is not allowed.
  bool accept(int32_t token);

  // Cost accounting, for the engine's metrics and the benchmark.
  double mask_seconds() const { return mask_seconds_; }
  int64_t masks_computed() const { return masks_computed_; }
  int64_t masks_cached() const { return masks_cached_; }

 private:
  void compute_mask(std::vector<uint64_t>* mask);
  void walk(uint32_t node, size_t depth, std::vector<uint64_t>* mask);

  std::shared_ptr<CompiledGrammar> g_;
  Matcher m_;
  std::vector<int32_t> heads_;    // the committed state
  std::vector<std::vector<int32_t>> levels_;  // the trie walk's states, one per depth
  std::shared_ptr<const std::vector<uint64_t>> mask_;  // for heads_, once computed
  double mask_seconds_ = 0;
  int64_t masks_computed_ = 0, masks_cached_ = 0;
};

}  // namespace ds::grammar
