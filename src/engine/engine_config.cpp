#include "engine/engine_config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/model.h"
#include "spec_decode/dspark_config.h"

namespace ds {

namespace {
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / double(1ull << 30));
  return buf;
}

// --max-model-len against one model's max_position_embeddings (`whose`: "the model's" or "the
// draft model's"). Past it, a model with rotary positions meets angles it never saw in training,
// so its attention is undefined there: refused. Attention without positions (KDA, NoPE MLA)
// computes the same function at any length, so only quality is at stake: a warning.
void check_positions(int max_model_len, const ModelConfig& mc, const std::string& whose) {
  const int limit = mc.max_position_embeddings;
  if (limit <= 0 || max_model_len <= limit) return;
  const std::string len = std::to_string(max_model_len), lim = std::to_string(limit);
  if (mc.has_positional_encoding())
    throw Error("invalid settings: --max-model-len " + len + " exceeds " + whose + " max_position_embeddings " + lim +
                ": its attention uses rotary positions (RoPE), which hold only up to " + lim +
                " positions; allowed range [2, " + lim + "]");
  spdlog::warn("--max-model-len {} is above {} max_position_embeddings {}: its attention has no positional encoding "
               "(KDA and NoPE MLA), so it runs at any length, but quality past the context its config names is "
               "untested and may degrade",
               len, whose, lim);
}
}  // namespace

void resolve_engine_config(EngineConfig* c, const Model& model, const Model* draft) {
  const ModelConfig& mc = model.config();
  auto fail = [](const std::string& msg) { throw Error("invalid settings: " + msg); };
  if (c->max_num_seqs < 1)
    fail("--max-num-seqs must be at least 1, got " + std::to_string(c->max_num_seqs));
  if (c->profile_steps < 0) fail("--profile-steps " + std::to_string(c->profile_steps) + " is negative (0: no table)");
  if (c->max_num_batched_tokens < 1)
    fail("--max-num-batched-tokens must be at least 1, got " +
         std::to_string(c->max_num_batched_tokens));
  // Every running sequence must be able to decode in every step, or a full batch would starve.
  if (c->max_num_batched_tokens < c->max_num_seqs)
    fail("--max-num-batched-tokens " + std::to_string(c->max_num_batched_tokens) +
         " is smaller than --max-num-seqs " + std::to_string(c->max_num_seqs) +
         ": each step must fit one decode row per running sequence");
  if (c->block_size < 1) fail("block size must be positive, got " + std::to_string(c->block_size));
  if (c->threads < 0) fail("--threads must be 0 (all cores) or more, got " + std::to_string(c->threads));
  if (c->max_waiting < 1)
    fail("--max-waiting must be at least 1, got " + std::to_string(c->max_waiting));
  if (c->max_model_len == 0)
    c->max_model_len = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : 8192;
  // The upper bound keeps block counts and positions far from int overflow; it is the longest
  // max_position_embeddings a config may give.
  if (c->max_model_len < 2 || c->max_model_len > kMaxConfigPositions)
    fail("--max-model-len must be in [2, " + std::to_string(kMaxConfigPositions) +
         "] (at least one prompt token and one new token), got " + std::to_string(c->max_model_len));
  check_positions(c->max_model_len, mc, "the model's");
  if (mc.vocab_size < 1) fail("model reports vocab_size " + std::to_string(mc.vocab_size));
  resolve_spec_options(&c->spec);
  const bool parallel = c->spec.draft_method == "parallel";  // named by resolve_spec_options
  if (c->spec.draft_method == "draft_model" && !draft) fail("--draft-model is set but no draft model was loaded");
  if (c->spec.confidence_threshold != 0 && !parallel)
    fail("--draft-confidence-threshold needs a parallel drafter (--draft-model whose model_type is " +
         std::string(kDSparkModelType) + ")");
  if (draft) {
    check_draft_matches(model, *draft);
    check_positions(c->max_model_len, draft->config(), "the draft model's");
  }
  // The draft's KV rows live in the same block ids as the target's.
  auto kv_bytes = [&](int bs) { return model.kv_bytes_per_block(bs) + (draft ? draft->kv_bytes_per_block(bs) : 0); };

  const int need_blocks = (c->max_model_len + c->block_size - 1) / c->block_size;
  if (c->total_cpu_dram_gb != 0) {
    // An aggregate budget: the pool takes half (all of it without prefix caching) unless sized
    // itself, the snapshots what is left unless sized themselves; the two must fit in it.
    if (!(c->total_cpu_dram_gb > 0) || !std::isfinite(c->total_cpu_dram_gb))
      fail("--total-cpu-dram-gb must be a positive number, got " + num(c->total_cpu_dram_gb));
    const double total_gib = c->total_cpu_dram_gb * 1e9 / double(1ull << 30);
    if (c->num_kv_blocks == 0 && c->kv_pool_gb == 0) c->kv_pool_gb = c->prefix.enabled ? total_gib / 2 : total_gib;
    const double pool_gib = c->num_kv_blocks > 0 ? double(c->num_kv_blocks) * double(kv_bytes(c->block_size)) / double(1ull << 30)
                                                 : c->kv_pool_gb;
    if (c->prefix.enabled && c->prefix.num_state_snapshots < 0 && c->prefix.state_cache_gb == 0)
      c->prefix.state_cache_gb = total_gib - pool_gib;
    const double used = pool_gib + (c->prefix.enabled ? c->prefix.state_cache_gb : 0);
    if (used > total_gib * (1 + 1e-9) || (c->prefix.enabled && c->prefix.state_cache_gb <= 0 && c->prefix.num_state_snapshots < 0))
      fail("--total-cpu-dram-gb " + num(c->total_cpu_dram_gb) + " GB (" + gb(total_gib * double(1ull << 30)) +
           " GiB) cannot hold --kv-pool-gb " + gb(pool_gib * double(1ull << 30)) + " and --state-cache-gb " +
           gb(c->prefix.state_cache_gb * double(1ull << 30)) + " GiB");
  }
  if (c->num_kv_blocks == 0) {
    if (!(c->kv_pool_gb >= 0) || !std::isfinite(c->kv_pool_gb))
      fail("--kv-pool-gb must be a positive number (or 0 for auto), got " + num(c->kv_pool_gb));
    const size_t per_block = kv_bytes(c->block_size);
    if (c->kv_pool_gb == 0 && per_block > 0) {
      // Without prefix caching a pool never holds more than max_num_seqs full sequences, so
      // that is all auto takes. With it, blocks nobody holds stay cached for later prompts, so
      // auto takes at least kAutoCacheFloorGb: reuse across agentic turns needs room for many
      // sessions' histories, not just the running ones.
      double want = double(need_blocks) * double(c->max_num_seqs) * double(per_block);
      if (c->prefix.enabled) want = std::max(want, kAutoCacheFloorGb * double(1ull << 30));
      c->kv_pool_gb = std::min(want, kAutoPoolCapGb * double(1ull << 30)) / double(1ull << 30);
    }
    if (per_block == 0) {
      // No attention layers: blocks cost nothing, so give every slot a full-length table.
      c->num_kv_blocks = need_blocks * c->max_num_seqs;
    } else {
      const double pool_bytes = c->kv_pool_gb * double(1ull << 30);
      const double blocks = std::floor(pool_bytes / double(per_block));
      if (blocks < need_blocks)
        fail("--kv-pool-gb " + num(c->kv_pool_gb) + " holds " +
             std::to_string(int64_t(blocks)) + " KV blocks of " + std::to_string(c->block_size) +
             " tokens (" + std::to_string(per_block) + " bytes each), but one --max-model-len " +
             std::to_string(c->max_model_len) + " sequence needs " + std::to_string(need_blocks) +
             "; use --kv-pool-gb >= " + gb(double(need_blocks) * double(per_block)) +
             " or a smaller --max-model-len");
      c->num_kv_blocks = blocks > 1e9 ? 1000000000 : int(blocks);
    }
  } else if (c->num_kv_blocks < need_blocks) {
    fail("KV pool of " + std::to_string(c->num_kv_blocks) + " blocks cannot hold one --max-model-len " +
         std::to_string(c->max_model_len) + " sequence (" + std::to_string(need_blocks) + " blocks)");
  }

  validate_prefix_cache_options(c->prefix);
  const size_t state_bytes = model.state_bytes_per_slot() + (draft ? draft->state_bytes_per_slot() : 0);
  if (!c->prefix.enabled || state_bytes == 0) {
    c->prefix.num_state_snapshots = 0;
    if (state_bytes == 0) c->prefix.state_cache_gb = 0;
  } else if (c->prefix.num_state_snapshots < 0) {
    if (!(c->prefix.state_cache_gb >= 0) || !std::isfinite(c->prefix.state_cache_gb))
      fail("--state-cache-gb must be a positive number (or 0 for auto), got " + num(c->prefix.state_cache_gb));
    double bytes = c->prefix.state_cache_gb * double(1ull << 30);
    if (bytes == 0) {
      // A resume needs the state as well as the KV, and a state costs as much as many blocks
      // (deltacoder: 168 KiB against 28 KiB a block), so it gets as much memory as the pool.
      const double kv_total = double(c->num_kv_blocks) * double(kv_bytes(c->block_size));
      bytes = std::max({kv_total, kAutoCacheFloorGb * double(1ull << 30), 2.0 * c->max_num_seqs * double(state_bytes)});
      bytes = std::min(bytes, kAutoPoolCapGb * double(1ull << 30));
    }
    const double n = std::floor(bytes / double(state_bytes));
    if (n < 1)
      fail("--state-cache-gb " + num(c->prefix.state_cache_gb) + " holds no state snapshot of " +
           std::to_string(state_bytes) + " bytes; use --state-cache-gb >= " + gb(double(state_bytes)) +
           " or --no-prefix-caching");
    // A snapshot is only of use where its prefix's blocks are cached: never more than blocks.
    c->prefix.num_state_snapshots = int(std::min(n, double(c->num_kv_blocks)));
    c->prefix.state_cache_gb = double(c->prefix.num_state_snapshots) * double(state_bytes) / double(1ull << 30);
  }
}

RuntimeLimits runtime_limits(const EngineConfig& c) {
  RuntimeLimits l;
  l.max_seqs = c.max_num_seqs;
  l.max_batch_tokens = c.max_num_batched_tokens;
  // One sampled row per sequence per step; a verify chunk scores K + 1.
  const int rows_per_seq = c.spec.enabled() ? c.spec.num_speculative_tokens + 1 : 1;
  l.max_logit_rows = c.max_num_seqs * rows_per_seq;
  l.spec_positions = c.spec.enabled() ? rows_per_seq : 0;
  l.rollback = c.spec.state_rollback == "replay" ? StateRollback::Replay : StateRollback::Lanes;
  l.num_kv_blocks = c.num_kv_blocks;
  l.block_size = c.block_size;
  l.threads = c.threads;
  return l;
}

}  // namespace ds
