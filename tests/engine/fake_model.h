// A stand-in for the real model with the same interface and the same contract, cheap enough for
// hundreds of sequences in a unit test. Its "KV cache" stores each token at the position its
// block table says, and its "recurrent state" is a rolling hash of every token fed to the slot;
// the next token is a hash of both: the state, and a second rolling hash over every position of
// the sequence read back through its block table. So a wrong, stale or swapped block anywhere in
// the prefix (not only near its end), a slot reused without reset, a token fed twice or skipped,
// or state leaking between sequences all change the output, while a correct engine gives exactly
// the tokens of reference_next() regardless of batching, caching or preemption.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/model.h"

namespace ds::testing {

class FakeModel : public Model {
 public:
  explicit FakeModel(int vocab = 512, std::vector<int32_t> eos = {}) {
    cfg_.model_type = "fake";
    cfg_.vocab_size = vocab;
    cfg_.num_layers = 1;
    cfg_.hidden_size = 8;
    cfg_.eos_token_ids = std::move(eos);
  }

  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb93fe53ce34dull;
    x ^= x >> 33;
    return x;
  }
  static uint64_t roll(uint64_t state, int32_t tok) { return mix(state * 1000003ull + uint64_t(tok) + 1); }
  // The KV read-back's own chain, different from roll() so that the state and the blocks are
  // checked independently (a right state cannot hide a wrong block, nor the reverse).
  static uint64_t kv_roll(uint64_t h, int32_t tok) { return mix(h ^ (uint64_t(uint32_t(tok)) + 7) * 0x9e3779b97f4a7c15ull); }
  static uint64_t combine(uint64_t state, uint64_t kv) { return mix(state ^ (kv * 3 + 1)); }

  // The hash the next token is drawn from, given the whole history.
  static uint64_t history_hash(const std::vector<int32_t>& toks) {
    uint64_t st = 0, kv = 0;
    for (int32_t t : toks) {
      st = roll(st, t);
      kv = kv_roll(kv, t);
    }
    return combine(st, kv);
  }
  // The argmax of the logits after `toks`: what greedy decoding must produce.
  int32_t reference_next(const std::vector<int32_t>& toks) const {
    return int32_t(history_hash(toks) % uint64_t(cfg_.vocab_size));
  }
  std::vector<int32_t> reference_generate(std::vector<int32_t> toks, int n,
                                          bool stop_at_eos = false) const {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      int32_t t = reference_next(toks);
      out.push_back(t);
      toks.push_back(t);
      if (stop_at_eos && is_eos(t)) break;
    }
    return out;
  }
  // The logits forward() writes after `toks`, for checks that recompute what the engine derives
  // from them (log-softmax, top-k) independently.
  std::vector<float> reference_logits(const std::vector<int32_t>& toks) const {
    std::vector<float> out(size_t(cfg_.vocab_size));
    write_logits(history_hash(toks), out.data());
    return out;
  }
  // log-softmax of reference_logits(toks) in double, sorted by descending logprob (ties by id).
  std::vector<std::pair<int32_t, double>> reference_logprobs(const std::vector<int32_t>& toks) const {
    const auto lg = reference_logits(toks);
    double mx = lg[0];
    for (float v : lg) mx = std::max(mx, double(v));
    double sum = 0;
    for (float v : lg) sum += std::exp(double(v) - mx);
    std::vector<std::pair<int32_t, double>> out;
    for (size_t i = 0; i < lg.size(); ++i) out.push_back({int32_t(i), double(lg[i]) - mx - std::log(sum)});
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }
  bool is_eos(int32_t t) const {
    for (int32_t e : cfg_.eos_token_ids)
      if (e == t) return true;
    return false;
  }

  const ModelConfig& config() const override { return cfg_; }
  // For tests of what the engine derives from a config (layer kinds, positional limits).
  ModelConfig& mutable_config() { return cfg_; }
  size_t kv_bytes_per_block(int block_size) const override { return size_t(block_size) * 16; }
  // The fake's blocks hold hashes whatever the dtype; it only remembers what it was given.
  void set_kv_dtype(KvDtype t) override { kv_dtype_ = t; }
  KvDtype kv_dtype() const override { return kv_dtype_; }
  void set_activation_dtype(ActivationDtype a) override { activation_dtype_ = a; }
  ActivationDtype activation_dtype() const override { return activation_dtype_; }
  size_t state_bytes_per_slot() const override { return sizeof(uint64_t) * 2; }
  size_t weights_bytes() const override { return 0; }
  uint64_t weights_fingerprint() const override { return fingerprint; }
  size_t decode_weight_bytes() const override { return 0; }

  void allocate(const RuntimeLimits& limits) override {
    limits_ = limits;
    kv_.assign(size_t(limits.num_kv_blocks) * size_t(limits.block_size), -1);
    state_.assign(size_t(limits.max_seqs), 0);
    pos_.assign(size_t(limits.max_seqs), -1);
  }
  const RuntimeLimits& limits() const override { return limits_; }
  // Speculative decoding is tested on real models (tests/spec); the fake has no lanes.
  void commit_speculative(int, int) override { throw std::logic_error("FakeModel keeps no speculative lanes"); }
  size_t rollback_bytes_per_slot() const override { return 0; }

  void forward(const ForwardBatch& batch, float* logits) override {
    if (fail_next.exchange(false)) throw std::runtime_error("injected forward failure");
    if (step_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_delay_us.load()));
    ++steps;
    max_rows_seen = std::max<int>(max_rows_seen, int(batch.tokens.size()));
    check(int(batch.tokens.size()) <= limits_.max_batch_tokens, "batch over max_batch_tokens");
    check(int(batch.seqs.size()) <= limits_.max_seqs, "more chunks than slots");
    int logit_rows = 0;
    std::vector<bool> seen(size_t(limits_.max_seqs), false);
    for (const SeqChunk& c : batch.seqs) {
      check(c.slot >= 0 && c.slot < limits_.max_seqs, "slot out of range");
      check(!seen[size_t(c.slot)], "slot used twice in one step");
      seen[size_t(c.slot)] = true;
      check(c.num_tokens >= 1, "empty chunk");
      check(c.num_logits == 0 || c.num_logits == 1, "unexpected num_logits");
      if (c.start_pos == 0) {
        state_[size_t(c.slot)] = 0;
      } else {
        // The slot must hold exactly the tokens before start_pos: nothing skipped or repeated.
        check(pos_[size_t(c.slot)] == c.start_pos, "slot state is at position " +
                                                        std::to_string(pos_[size_t(c.slot)]) +
                                                        ", chunk starts at " +
                                                        std::to_string(c.start_pos));
      }
      uint64_t st = state_[size_t(c.slot)];
      for (int i = 0; i < c.num_tokens; ++i) {
        const int pos = c.start_pos + i;
        const int32_t tok = batch.tokens[size_t(c.token_offset + i)];
        const int32_t blk = c.block_table[pos / limits_.block_size];
        check(blk >= 0 && blk < limits_.num_kv_blocks, "block id out of range");
        kv_[size_t(blk) * size_t(limits_.block_size) + size_t(pos % limits_.block_size)] = tok;
        st = roll(st, tok);
      }
      state_[size_t(c.slot)] = st;
      const int end = c.start_pos + c.num_tokens;
      pos_[size_t(c.slot)] = end;
      if (c.num_logits == 1) {
        // Every position of the sequence, read back through its block table.
        uint64_t kv = 0;
        for (int p = 0; p < end; ++p) {
          const int32_t blk = c.block_table[p / limits_.block_size];
          const bool ok = blk >= 0 && blk < limits_.num_kv_blocks;
          check(ok, "block id out of range on read-back");
          kv = kv_roll(kv, ok ? kv_[size_t(blk) * size_t(limits_.block_size) + size_t(p % limits_.block_size)] : -2);
        }
        write_logits(combine(st, kv), logits + size_t(logit_rows) * size_t(cfg_.vocab_size));
        ++logit_rows;
      }
    }
  }

  void save_state(int slot, void* dst) const override {
    uint64_t v[2] = {state_[size_t(slot)], uint64_t(pos_[size_t(slot)])};
    std::memcpy(dst, v, sizeof v);
  }
  void load_state(int slot, const void* src) override {
    uint64_t v[2];
    std::memcpy(v, src, sizeof v);
    state_[size_t(slot)] = v[0];
    pos_[size_t(slot)] = int(v[1]);
  }

  void save_block(int block, void* dst) const override {
    std::memset(dst, 0, size_t(limits_.block_size) * 16);
    std::memcpy(dst, kv_.data() + size_t(block) * size_t(limits_.block_size), size_t(limits_.block_size) * sizeof(int32_t));
  }
  void load_block(int block, const void* src) override {
    std::memcpy(kv_.data() + size_t(block) * size_t(limits_.block_size), src, size_t(limits_.block_size) * sizeof(int32_t));
  }

  // Stands for the weights' content; tests restart the engine on "other weights" with another.
  uint64_t fingerprint = 1;
  std::atomic<bool> fail_next{false};
  std::atomic<int> step_delay_us{0};
  std::atomic<int> steps{0};
  std::atomic<int> max_rows_seen{0};
  std::atomic<int> violations{0};
  std::string first_violation;

 private:
  KvDtype kv_dtype_ = KvDtype::F32;
  ActivationDtype activation_dtype_ = ActivationDtype::F32;
  void check(bool ok, const std::string& what) {
    if (!ok && violations.fetch_add(1) == 0) first_violation = what;
  }
  // A clear winner (the reference token) over a spread of pseudo-random smaller logits, so
  // greedy is exact and sampling has a non-trivial distribution to draw from.
  void write_logits(uint64_t h, float* out) const {
    const int V = cfg_.vocab_size;
    const int32_t win = int32_t(h % uint64_t(V));
    for (int v = 0; v < V; ++v) out[v] = float(mix(h + uint64_t(v)) % 1000) / 400.f;
    out[win] = 4.f;
  }

  ModelConfig cfg_;
  RuntimeLimits limits_;
  std::vector<int32_t> kv_;
  std::vector<uint64_t> state_;
  std::vector<int> pos_;
};

}  // namespace ds::testing
