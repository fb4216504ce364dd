#include "grammar/token_constraint.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace ds::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes)
    : g_(std::move(g)), vocab_(std::move(vocab)) {
  if (!g_.finished()) g_.finish();
  DS_CHECK(vocab_ != nullptr, "grammar: no vocabulary");
  cache_limit_ = std::max<size_t>(16, cache_bytes / std::max<size_t>(1, vocab_->mask_words() * 8));
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::find(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second;
}

void CompiledGrammar::store(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> mask) {
  std::lock_guard<std::mutex> lk(mu_);
  if (cache_.size() >= cache_limit_) cache_.clear();  // crude, but bounded and rare
  cache_.emplace(key, std::move(mask));
}

size_t CompiledGrammar::cached_masks() {
  std::lock_guard<std::mutex> lk(mu_);
  return cache_.size();
}

TokenConstraint::TokenConstraint(std::shared_ptr<CompiledGrammar> g) : g_(std::move(g)), m_(g_->grammar()) {
  m_.initial(&heads_);
}

bool TokenConstraint::complete() const {
  return std::find(heads_.begin(), heads_.end(), Matcher::kAccepted) != heads_.end();
}

bool TokenConstraint::can_continue() {
  for (uint64_t w : allowed())
    if (w) return true;
  return false;
}

const std::vector<uint64_t>& TokenConstraint::allowed() {
  if (mask_) return *mask_;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string key = m_.key(heads_.data(), heads_.size());
  mask_ = g_->find(key);
  if (mask_) {
    ++masks_cached_;
  } else {
    auto mask = std::make_shared<std::vector<uint64_t>>(g_->vocabulary().mask_words(), 0);
    compute_mask(mask.get());
    g_->store(key, mask);
    mask_ = std::move(mask);
    ++masks_computed_;
  }
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return *mask_;
}

void TokenConstraint::compute_mask(std::vector<uint64_t>* mask) {
  if (levels_.empty()) levels_.resize(1);
  levels_[0].assign(heads_.begin(), heads_.end());
  const size_t mark = m_.arena_size();
  walk(0, 0, mask);
  m_.truncate(mark);
}

void TokenConstraint::walk(uint32_t node, size_t depth, std::vector<uint64_t>* mask) {
  // levels_[depth] holds the heads after this node's bytes. Each edge advances them by one byte
  // into levels_[depth + 1]; a subtree whose state dies is skipped whole, and the arena nodes it
  // made are dropped on return. The level vectors keep their capacity, so a warm walk does not
  // allocate.
  const TokenVocabulary& v = g_->vocabulary();
  const TokenVocabulary::Node& n = v.nodes()[node];
  const ByteSet next = m_.next_bytes(levels_[depth].data(), levels_[depth].size());
  if (next.empty()) return;
  if (levels_.size() < depth + 2) levels_.resize(depth + 2);
  const auto* e = v.edges().data() + n.first_edge;
  for (uint32_t i = 0; i < n.num_edges; ++i) {
    if (!next.has(e[i].byte)) continue;
    const size_t mark = m_.arena_size();
    std::vector<int32_t>& out = levels_[depth + 1];
    out.clear();
    const std::vector<int32_t>& cur = levels_[depth];
    if (m_.advance(cur.data(), cur.size(), e[i].byte, &out)) {
      const TokenVocabulary::Node& c = v.nodes()[e[i].child];
      for (uint32_t t = 0; t < c.num_tokens; ++t) {
        const int32_t id = v.tokens()[c.first_token + t];
        (*mask)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
      }
      if (c.num_edges) walk(e[i].child, depth + 1, mask);
    }
    m_.truncate(mark);
  }
}

bool TokenConstraint::accept(int32_t token) {
  if (token < 0 || token >= g_->vocabulary().size() || !allows(token)) return false;
  std::vector<int32_t> cur = heads_, next;
  for (char c : g_->vocabulary().bytes(token)) {
    next.clear();
    if (!m_.advance(cur.data(), cur.size(), uint8_t(c), &next)) return false;  // cannot happen: allowed
    cur.swap(next);
  }
  heads_ = std::move(cur);
  m_.compact(&heads_);
  mask_.reset();
  return true;
}

}  // namespace ds::grammar
