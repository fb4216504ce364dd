// The parallel drafter's numerics (method and reasons: tools/train/dspark.py, which trains it
// and is its reference): context features fused from the target's tapped layers and projected
// once per committed position into each draft layer's keys and values; a block of slots run
// through the draft layers in one pass; the Markov term and the confidence head per slot.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/activation_dtype.h"
#include "kernels/matmul.h"
#include "spec_decode/dspark_config.h"

namespace ds {

class Model;
class ThreadPool;

class DSparkModel {
 public:
  // Checks the drafter fits the target and K (check_dspark_fits), then loads dir's weights; the
  // embedding and LM head are the target's, and so are the threads.
  DSparkModel(const std::string& dir, const Model& target, int k);
  const DSparkConfig& config() const { return cfg_; }
  size_t weights_bytes() const { return weights_bytes_; }
  void set_activation_dtype(ActivationDtype a);

  // Floats one context position keeps: every layer's key (RoPE'd at its position) and value.
  size_t context_floats() const { return size_t(cfg_.num_layers) * 2 * size_t(cfg_.qkv_width()); }
  // rows of target taps ([rows][taps * hidden]) at positions pos -> out rows of context_floats().
  void context(const float* taps, const int32_t* pos, int rows, float* out) const;

  // One round: the context entries it attends (context() rows, oldest first), the token it
  // starts from and that token's position.
  struct Round {
    std::span<const float* const> context;
    int32_t token = 0;
    int32_t pos = 0;
  };
  // Every slot of every round: z, [rounds][block_size][hidden], the final-normed hiddens.
  void block(std::span<const Round> rounds, float* z) const;
  // Base logits of slot rows through the target's LM head.
  void base_logits(const float* z, int rows, float* logits) const;
  // The Markov embedding of the previous token (markov_rank floats).
  void markov_embed(int32_t prev, float* m) const;
  // logits += w2 . m for `rows` rows of m.
  void add_markov(const float* m, int rows, float* logits) const;
  // The chance slot z's greedy token survives, given its Markov embedding and (context copy)
  // whether its previous token occurs in the window.
  float confidence(const float* z, const float* m, int slot, bool prev_in_window) const;

  // The context copy term (config context_copy; tools/train/dspark.py says why): a position of
  // the window, its token and the token that followed it (-1: not known, a gap in the window).
  struct CopyEntry {
    int32_t token = 0;
    int32_t next = -1;
  };
  // Matches of prev in the window with a known next token.
  static int copy_matches(std::span<const CopyEntry> window, int32_t prev);
  // logits[next] += count * copy_scale[slot] for each next token that follows prev in the
  // window, count its matches (summed first, as the training code does). No-op without the term.
  void add_copy(std::span<const CopyEntry> window, int32_t prev, int slot, float* logits) const;

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm;
    PackedWeight qkv, kv, o, gate_up, down;  // kv: k and v alone, for context positions
  };
  const Model& target_;
  ThreadPool* pool_;
  DSparkConfig cfg_;
  PackedWeight fc_, markov_w2_;
  std::vector<float> hidden_norm_, final_norm_, mask_embedding_, conf_w_, copy_scale_, copy_confidence_;
  float conf_b_ = 0;
  std::vector<std::byte> markov_w1_;
  DType markov_w1_dtype_ = DType::F32;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  size_t weights_bytes_ = 0;
  // Scratch the calls reuse: it grows to the largest batch once, then a round allocates
  // nothing (the engine thread is the only caller; scores_ has one row per pool thread).
  struct Scratch {
    std::vector<float> x, h, qkv, o, gu, a, fused, c, kv;
    std::vector<std::vector<float>> scores;
  };
  mutable Scratch scratch_;
};

}  // namespace ds
