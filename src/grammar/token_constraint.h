// Grammar-constrained decoding: which tokens may come next, as a bit mask over the vocabulary.
//
// A CompiledGrammar (the grammar, the vocabulary, and what has been learnt about both) is built
// once per distinct schema or tool set and shared by every request that uses it; a
// TokenConstraint is one request's place in it.
//
// The grammar's states (sets of matcher stacks, named by their key) are interned as the states
// of a lazily built DFA over bytes: each state keeps its byte transitions once followed, and its
// token mask once computed. A mask is a walk of the vocabulary's trie where every edge is a
// transition: the matcher runs only the first time a (state, byte) pair is met, anywhere in the
// grammar's life. This matters where states do not repeat: a string with a maxLength, or an
// integer's bounded digits, make a new state per character, but state k's walk follows the
// transitions to k+1.. that the next masks walk again. A request's own accept() steps the same
// transitions, and a mask already computed for a state (by any request) is a lookup.
//
// Memory is bounded by cache_bytes (transitions, masks, keys); past it the learnt states are
// dropped at the next call and relearnt, and constraints in flight find their state again by
// its key.
//
// Thread use: a TokenConstraint belongs to one thread at a time. The CompiledGrammar takes a
// mutex per call, so constraints of one grammar may be stepped from any threads.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace ds::grammar {

class CompiledGrammar {
 public:
  // `g` is finished here if it is not yet. Throws GrammarTooLarge when the grammar's first state
  // already passes its limits on stacks.
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes = 64u << 20);
  ~CompiledGrammar();

  const Grammar& grammar() const { return g_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }

  size_t cached_masks();  // states whose mask is known
  size_t states();        // states interned
  int64_t resets();       // times the learnt states were dropped for the memory bound
  // Bytes refused because the state after them would pass the grammar's limits on stacks
  // (grammar/matcher.h): an ambiguous grammar the model was kept out of.
  int64_t overflows();
  // What this grammar holds now: its flat form and what it has learnt (at most cache_bytes).
  size_t memory_bytes();

 private:
  friend class TokenConstraint;
  static constexpr int32_t kDead = -1, kUnknown = -2;
  struct State {
    std::vector<int32_t> heads;              // in m_'s arena
    std::shared_ptr<const std::string> key;  // the matcher's key of heads
    bool accepting = false;
    std::unique_ptr<int32_t[]> next;  // 256 transitions (kUnknown, kDead or a state), once stepped
    std::shared_ptr<const std::vector<uint64_t>> mask;
  };

  // All below with mu_ held.
  void reset_if_full();
  int32_t intern(size_t arena_mark);  // the state of scratch_'s heads; nodes past the mark dropped if known
  int32_t initial_state() const { return 0; }
  int32_t state_of_key(const std::string& key);
  int32_t step(int32_t s, uint8_t byte);
  void walk(int32_t s, uint32_t node, std::vector<uint64_t>* mask);

  Grammar g_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t budget_;
  std::mutex mu_;
  Matcher m_;
  std::vector<State> states_;
  std::unordered_map<std::string_view, int32_t> index_;  // views into the states' keys
  std::vector<int32_t> scratch_;
  size_t bytes_ = 0;
  uint64_t generation_ = 0;
  size_t masks_ = 0;
  int64_t overflows_ = 0;
};

class TokenConstraint {
 public:
  explicit TokenConstraint(std::shared_ptr<CompiledGrammar> g);

  // Tokens that may come next (one bit per id, 64 per word), not counting end tokens: those
  // are for the caller to allow when complete(). Valid until the next accept().
  const std::vector<uint64_t>& allowed();
  bool allows(int32_t token) { return (allowed()[size_t(token) >> 6] >> (token & 63)) & 1; }
  // The output so far is a whole sentence of the grammar (an end token may come now).
  bool complete() const { return accepting_; }
  // Some text token may come next.
  bool can_continue();
  // Advances past `token`. False (and no change) when the token is not allowed.
  bool accept(int32_t token);

  // Cost accounting, for the engine's metrics and the benchmark.
  double mask_seconds() const { return mask_seconds_; }
  int64_t masks_computed() const { return masks_computed_; }
  int64_t masks_cached() const { return masks_cached_; }

 private:
  int32_t sync();  // this constraint's state in the grammar's current generation (lock held)

  std::shared_ptr<CompiledGrammar> g_;
  int32_t state_ = 0;
  uint64_t generation_ = 0;
  std::shared_ptr<const std::string> key_;  // of state_, to find it again after a reset
  bool accepting_ = false;
  std::shared_ptr<const std::vector<uint64_t>> mask_;  // for state_, once computed
  double mask_seconds_ = 0;
  int64_t masks_computed_ = 0, masks_cached_ = 0;
};

}  // namespace ds::grammar
