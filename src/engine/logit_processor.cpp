#include "engine/logit_processor.h"

#include <algorithm>
#include <chrono>

#include "grammar/token_constraint.h"
#include "kernels/logit_processing.h"

namespace ds {

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

LogitProcessor::LogitProcessor(int vocab, std::vector<int32_t> eos_ids)
    : vocab_(vocab), eos_(std::move(eos_ids)), row_(size_t(vocab)), mask_((size_t(vocab) + 63) / 64) {}

bool LogitProcessor::is_end(const Sequence& s, int32_t token) const {
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return true;
  const auto& stop = s.req.stop_token_ids;
  return std::find(stop.begin(), stop.end(), token) != stop.end();
}

const float* LogitProcessor::process(Sequence& s, const float* logits) {
  const auto t0 = std::chrono::steady_clock::now();
  std::copy(logits, logits + vocab_, row_.begin());
  const SamplingParams& p = s.req.sampling;
  const PenaltyParams pen{p.repetition_penalty, p.frequency_penalty, p.presence_penalty};
  if (pen.any()) {
    if (pen.repetition != 1.f && !s.seen_built) {
      // Every distinct token so far (after a preemption the output is part of tokens too).
      std::vector<int32_t> all(s.tokens.begin(), s.tokens.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      s.seen = std::move(all);
      s.seen_built = true;
    }
    apply_penalties(row_.data(), vocab_, pen, s.output_counts, s.seen);
  }
  if (!p.logit_bias.empty()) apply_logit_bias(row_.data(), vocab_, p.logit_bias);
  if (s.req.constraint) {
    grammar::TokenConstraint& c = *s.req.constraint;
    const std::vector<uint64_t>& allowed = c.allowed();
    std::fill(mask_.begin(), mask_.end(), 0);
    std::copy_n(allowed.begin(), std::min(allowed.size(), mask_.size()), mask_.begin());
    if (vocab_ % 64) mask_.back() &= (uint64_t(1) << (vocab_ % 64)) - 1;  // ids past the model's rows
    if (c.complete() && !s.req.ignore_eos) {
      for (int32_t t : eos_)
        if (t >= 0 && t < vocab_) mask_[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
      for (int32_t t : s.req.stop_token_ids)
        if (t >= 0 && t < vocab_) mask_[size_t(t) >> 6] |= uint64_t(1) << (t & 63);
    }
    bool any = false;
    for (uint64_t w : mask_) any = any || w != 0;
    if (!any) {
      seconds_ += since(t0);
      return nullptr;
    }
    apply_token_mask(row_.data(), vocab_, mask_.data());
    ++constrained_tokens_;
  }
  seconds_ += since(t0);
  return row_.data();
}

bool LogitProcessor::observe(Sequence& s, int32_t token) {
  const auto t0 = std::chrono::steady_clock::now();
  const SamplingParams& p = s.req.sampling;
  if (p.frequency_penalty != 0.f || p.presence_penalty != 0.f) {
    auto [it, fresh] = s.count_index.try_emplace(token, int32_t(s.output_counts.size()));
    if (fresh)
      s.output_counts.emplace_back(token, 1);
    else
      ++s.output_counts[size_t(it->second)].second;
  }
  if (p.repetition_penalty != 1.f && s.seen_built) {
    auto at = std::lower_bound(s.seen.begin(), s.seen.end(), token);
    if (at == s.seen.end() || *at != token) s.seen.insert(at, token);
  }
  bool ok = true;
  if (s.req.constraint && !is_end(s, token)) ok = s.req.constraint->accept(token);
  seconds_ += since(t0);
  return ok;
}

}  // namespace ds
