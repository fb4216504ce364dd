#include "grammar/token_constraint.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"

namespace ds::grammar {

namespace {
Grammar finished(Grammar g) {
  if (!g.finished()) g.finish();
  return g;
}
}  // namespace

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes)
    : g_(finished(std::move(g))), vocab_(std::move(vocab)), budget_(cache_bytes), m_(g_) {
  DS_CHECK(vocab_ != nullptr, "grammar: no vocabulary");
  std::lock_guard<std::mutex> lk(mu_);
  reset_if_full();  // builds the initial state
}

CompiledGrammar::~CompiledGrammar() = default;

void CompiledGrammar::reset_if_full() {
  if (!states_.empty() && bytes_ <= budget_) return;
  if (!states_.empty()) ++generation_;
  states_.clear();
  index_.clear();
  bytes_ = 0;
  masks_ = 0;
  m_.initial(&scratch_);  // clears the arena
  if (m_.overflowed())
    throw GrammarTooLarge("the grammar's first state holds more than " +
                          std::to_string(g_.limits().max_state_heads) + " alternatives at once");
  intern(m_.arena_size());
}

int32_t CompiledGrammar::intern(size_t arena_mark) {
  std::string key = m_.key(scratch_.data(), scratch_.size());
  if (auto it = index_.find(key); it != index_.end()) {
    m_.truncate(arena_mark);  // this state's stacks exist already
    return it->second;
  }
  State st;
  st.heads = scratch_;
  st.accepting = std::find(scratch_.begin(), scratch_.end(), Matcher::kAccepted) != scratch_.end();
  bytes_ += sizeof(State) + key.size() + st.heads.size() * sizeof(int32_t) +
            (m_.arena_size() - arena_mark) * 24 /* matcher nodes */ + 64 /* index entry */;
  st.key = std::make_shared<const std::string>(std::move(key));
  const int32_t id = int32_t(states_.size());
  index_.emplace(std::string_view(*st.key), id);
  states_.push_back(std::move(st));
  return id;
}

int32_t CompiledGrammar::state_of_key(const std::string& key) {
  if (auto it = index_.find(key); it != index_.end()) return it->second;
  const size_t mark = m_.arena_size();
  m_.from_key(key, &scratch_);
  return intern(mark);
}

int32_t CompiledGrammar::step(int32_t s, uint8_t byte) {
  if (!states_[size_t(s)].next) {
    states_[size_t(s)].next.reset(new int32_t[256]);
    std::fill_n(states_[size_t(s)].next.get(), 256, kUnknown);
    bytes_ += 256 * sizeof(int32_t);
  }
  int32_t t = states_[size_t(s)].next[byte];
  if (t != kUnknown) return t;
  scratch_.clear();
  const size_t mark = m_.arena_size();
  const std::vector<int32_t>& heads = states_[size_t(s)].heads;
  if (m_.advance(heads.data(), heads.size(), byte, &scratch_)) {
    t = intern(mark);  // may grow states_: index again below
  } else {
    if (m_.overflowed()) ++overflows_;
    m_.truncate(mark);
    t = kDead;
  }
  states_[size_t(s)].next[byte] = t;
  return t;
}

void CompiledGrammar::walk(int32_t s, uint32_t node, std::vector<uint64_t>* mask) {
  // Each trie edge is one transition of the state reached so far; a dead transition skips the
  // subtree of every token that starts with those bytes.
  const TokenVocabulary& v = *vocab_;
  const TokenVocabulary::Node& n = v.nodes()[node];
  const auto* e = v.edges().data() + n.first_edge;
  for (uint32_t i = 0; i < n.num_edges; ++i) {
    const int32_t t = step(s, e[i].byte);
    if (t < 0) continue;
    const TokenVocabulary::Node& c = v.nodes()[e[i].child];
    for (uint32_t k = 0; k < c.num_tokens; ++k) {
      const int32_t id = v.tokens()[c.first_token + k];
      (*mask)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
    if (c.num_edges) walk(t, e[i].child, mask);
  }
}

size_t CompiledGrammar::cached_masks() {
  std::lock_guard<std::mutex> lk(mu_);
  return masks_;
}

size_t CompiledGrammar::states() {
  std::lock_guard<std::mutex> lk(mu_);
  return states_.size();
}

int64_t CompiledGrammar::overflows() {
  std::lock_guard<std::mutex> lk(mu_);
  return overflows_;
}

size_t CompiledGrammar::memory_bytes() {
  std::lock_guard<std::mutex> lk(mu_);
  return g_.memory_bytes() + bytes_;
}

int64_t CompiledGrammar::resets() {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(generation_);
}

TokenConstraint::TokenConstraint(std::shared_ptr<CompiledGrammar> g) : g_(std::move(g)) {
  std::lock_guard<std::mutex> lk(g_->mu_);
  g_->reset_if_full();
  state_ = g_->initial_state();
  generation_ = g_->generation_;
  key_ = g_->states_[size_t(state_)].key;
  accepting_ = g_->states_[size_t(state_)].accepting;
}

int32_t TokenConstraint::sync() {
  g_->reset_if_full();
  if (generation_ != g_->generation_) {
    state_ = g_->state_of_key(*key_);
    generation_ = g_->generation_;
  }
  return state_;
}

const std::vector<uint64_t>& TokenConstraint::allowed() {
  if (mask_) return *mask_;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lk(g_->mu_);
    const int32_t s = sync();
    mask_ = g_->states_[size_t(s)].mask;
    if (mask_) {
      ++masks_cached_;
    } else {
      auto mask = std::make_shared<std::vector<uint64_t>>(g_->vocab_->mask_words(), 0);
      g_->walk(s, 0, mask.get());
      g_->bytes_ += mask->size() * sizeof(uint64_t);
      ++g_->masks_;
      g_->states_[size_t(s)].mask = mask;
      mask_ = std::move(mask);
      ++masks_computed_;
    }
  }
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return *mask_;
}

bool TokenConstraint::can_continue() {
  for (uint64_t w : allowed())
    if (w) return true;
  return false;
}

bool TokenConstraint::accept(int32_t token) {
  if (token < 0 || token >= g_->vocabulary().size()) return false;
  const std::string& bytes = g_->vocabulary().bytes(token);
  if (bytes.empty()) return false;  // not a text token: never allowed
  // A token is allowed exactly when each of its bytes has a live transition, which is how its
  // mask bit was found: no mask is needed to step.
  std::lock_guard<std::mutex> lk(g_->mu_);
  int32_t s = sync();
  for (char c : bytes) {
    s = g_->step(s, uint8_t(c));
    if (s < 0) return false;
  }
  state_ = s;
  key_ = g_->states_[size_t(s)].key;
  accepting_ = g_->states_[size_t(s)].accepting;
  mask_.reset();
  return true;
}

}  // namespace ds::grammar
