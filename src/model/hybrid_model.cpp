// The Model implementation for both model types: embeddings, the layer stack (each layer a
// mixer and an FFN behind model/mixer.h and model/ffn.h, made by model/layer_registry.h), final
// norm and LM head; KV pool, state slots and the activation arena sized once at allocate().

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/elementwise.h"
#include "model/layer_registry.h"
#include "model/model_files.h"
#include "model/step_context.h"
#include "model/tensor_split.h"
#include "model/weight_loader.h"
#include "core/work_sharing.h"

namespace ds {

namespace {

struct Layer {
  std::vector<float> input_norm, post_norm;
  std::unique_ptr<Mixer> mixer;
  std::unique_ptr<Ffn> ffn;
  size_t state_offset = 0;  // recurrent: floats into a slot's state
  size_t replay_offset = 0; // recurrent: floats into a replay entry
  size_t kv_offset = 0;     // attention: the bytes per token of the attention layers before it in the pool
};

class HybridModel final : public Model {
 public:
  HybridModel(const std::string& dir, std::shared_ptr<ThreadPool> pool, TensorShard shard = {},
              std::shared_ptr<Collectives> comm = nullptr, std::shared_ptr<Collectives> dcp_comm = nullptr);
  std::shared_ptr<ThreadPool> thread_pool() const override { return pool_; }

  const ModelConfig& config() const override { return cfg_; }
  // Under decode context parallel this rank holds block_size / dcp of a block's rows.
  size_t kv_bytes_per_block(int block_size) const override {
    return kv_bytes_per_token_ * size_t(block_size / shard_.dcp);
  }
  void set_kv_dtype(KvDtype t) override;
  KvDtype kv_dtype() const override { return kv_dtype_; }
  void set_activation_dtype(ActivationDtype a) override;
  ActivationDtype activation_dtype() const override { return activation_dtype_; }
  size_t state_bytes_per_slot() const override { return state_floats_per_slot_ * 4; }
  size_t weights_bytes() const override { return weights_bytes_; }
  uint64_t weights_fingerprint() const override { return fingerprint_; }
  size_t decode_weight_bytes() const override { return decode_weight_bytes_; }
  void allocate(const RuntimeLimits& limits) override;
  const RuntimeLimits& limits() const override { return limits_; }
  void forward(const ForwardBatch& batch, float* logits) override;
  void save_state(int slot, void* dst) const override;
  void load_state(int slot, const void* src) override;
  void save_block(int block, void* dst) const override;
  void load_block(int block, const void* src) override;
  void commit_speculative(int slot, int keep) override;
  size_t rollback_bytes_per_slot() const override;
  const ForwardProfile& last_profile() const override { return profile_; }
  void set_hidden_taps(const std::vector<int>& layers, int tail_rows) override;
  const float* hidden_taps() const override { return taps_.empty() ? nullptr : tap_rows_.data(); }
  void embed(std::span<const int32_t> ids, float* out) const override;
  void lm_head(const float* h, int rows, float* logits) const override;

 private:
  size_t step_floats(int n, int logit_rows) const;
  // A shard's residual after a mixer or FFN: the sum of every rank's x (no-op in one process).
  template <typename Mark>
  void reduce_residual(float* x, int n, Mark& mark_part) {
    if (!shard_.split()) return;
    comm_->allreduce_sum(x, size_t(n) * size_t(cfg_.hidden_size));
    mark_part(ForwardProfile::RankComm);
  }
  template <typename F>
  void for_each_block_span(int block, F&& f) const;

  ModelConfig cfg_;
  // A tensor-parallel shard (model/shard.h): local_ is the shape its layers hold; comm_ joins
  // their partial sums. One process: the whole model, local_ == cfg_, no comm_.
  TensorShard shard_;
  std::shared_ptr<Collectives> comm_;
  std::shared_ptr<Collectives> dcp_comm_;  // the dcp group's (decode context parallel)
  AttentionShard attn_;
  ModelConfig local_;
  std::string dir_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<std::byte> embed_;  // aligned copy of the embedding table in its checkpoint dtype
  DType embed_dtype_ = DType::F32;
  std::vector<Layer> layers_;
  std::vector<const Layer*> recurrent_layers_;  // those with state, for replay
  std::vector<float> final_norm_;
  PackedWeight lm_head_;  // a shard: its vocab_size / shard.size rows
  std::vector<float> lm_part_, lm_all_;  // a shard's logits rows, and rank 0's gathered ones
  KvDtype kv_dtype_ = KvDtype::F32;
  ActivationDtype activation_dtype_ = ActivationDtype::F32;
  size_t kv_bytes_per_token_ = 0, state_floats_per_slot_ = 0, replay_floats_per_token_ = 0;
  size_t weights_bytes_ = 0, decode_weight_bytes_ = 0;
  uint64_t fingerprint_ = 0;

  RuntimeLimits limits_;
  bool allocated_ = false;
  ForwardProfile profile_;
  // Not zeroed: a position is always written before it is read, and an untouched pool costs
  // no memory until blocks are used (the allocator maps large blocks lazily).
  LargeBuffer kv_pool_;  // huge pages: decode attention streams it (core/huge_pages.h)
  // KDA states of every slot (f32), on huge pages: a decode step reads and writes each
  // decoding sequence's (1.7 MB for bench-100m), scattered over the slots.
  LargeBuffer states_mem_;
  float* states_ = nullptr;
  // Speculative rollback: [max_seqs][spec_positions] states (lanes) or replay entries.
  std::vector<float> rollback_;
  Arena arena_;
  std::vector<std::vector<float>> thread_scratch_;
  std::vector<int> taps_;          // layers whose output a drafter reads, in tap order
  std::vector<int> tap_of_layer_;  // per layer: its index in taps_, or -1
  std::vector<float> tap_rows_;    // [max_batch_tokens][taps][hidden]
  int tap_tail_ = 0;               // rows copied at the end of each chunk
};

HybridModel::HybridModel(const std::string& dir, std::shared_ptr<ThreadPool> pool, TensorShard shard,
                         std::shared_ptr<Collectives> comm, std::shared_ptr<Collectives> dcp_comm)
    : cfg_(load_model_config(dir)), shard_(shard), comm_(std::move(comm)), dcp_comm_(std::move(dcp_comm)), dir_(dir),
      pool_(std::move(pool)) {
  check_tensor_split(cfg_, shard_.size, shard_.dcp);
  DS_CHECK(shard_.split() == (comm_ != nullptr), "a split model needs its ranks' collectives, and only it");
  DS_CHECK((shard_.dcp > 1) == (dcp_comm_ != nullptr), "decode context parallel needs its group's collectives, and only it");
  attn_ = AttentionShard{shard_.dcp_rank, shard_.dcp, shard_.split() && shard_.dcp > 1, dcp_comm_.get()};
  local_ = shard_config(cfg_, shard_);
  WeightStore store = WeightStore::open(dir);
  fingerprint_ = store.fingerprint();
  const int H = cfg_.hidden_size;
  const TensorView& emb = WeightLoader{store, ""}.float_tensor("model.embed_tokens.weight", {int64_t(cfg_.vocab_size), int64_t(H)});
  embed_dtype_ = emb.dtype;
  embed_.resize(emb.nbytes);
  std::memcpy(embed_.data(), emb.data, emb.nbytes);
  weights_bytes_ += emb.nbytes;
  for (int i = 0; i < cfg_.num_layers; ++i) {
    WeightLoader w{store, "model.layers." + std::to_string(i) + ".", shard_};
    Layer L;
    L.input_norm = w.vector_f32("input_layernorm.weight", H);
    L.post_norm = w.vector_f32("post_attention_layernorm.weight", H);
    L.mixer = make_mixer(cfg_.mixer[size_t(i)], local_, w);
    if (L.mixer->state_floats() > 0) {
      L.state_offset = state_floats_per_slot_;
      state_floats_per_slot_ += L.mixer->state_floats();
      L.replay_offset = replay_floats_per_token_;
      replay_floats_per_token_ += L.mixer->replay_floats();
    }
    const size_t mixer_bytes = L.mixer->weight_bytes();
    L.ffn = make_ffn(cfg_.ffn[size_t(i)], local_, w);
    const size_t ffn_bytes = L.ffn->weight_bytes(), ffn_decode = L.ffn->decode_weight_bytes();
    weights_bytes_ += mixer_bytes + ffn_bytes + 2 * size_t(H) * 4;
    decode_weight_bytes_ += mixer_bytes + ffn_decode + 2 * size_t(H) * 4;
    layers_.push_back(std::move(L));
  }
  for (const Layer& L : layers_)
    if (L.mixer->state_floats() > 0) recurrent_layers_.push_back(&L);
  WeightLoader top{store, "", shard_};
  final_norm_ = top.vector_f32("model.norm.weight", H);
  const int local_vocab = cfg_.vocab_size / shard_.size;
  if (cfg_.tie_word_embeddings) {
    const size_t row_bytes = embed_.size() / size_t(cfg_.vocab_size);
    std::vector<std::byte> rows(embed_.begin() + long(row_bytes * size_t(local_vocab) * size_t(shard_.rank)),
                                embed_.begin() + long(row_bytes * size_t(local_vocab) * size_t(shard_.rank + 1)));
    lm_head_ = pack_weight(rows.data(), embed_dtype_, local_vocab, H);
  } else {
    lm_head_ = top.linear("lm_head.weight", local_vocab, H);
    weights_bytes_ += lm_head_.bytes();
  }
  // A decode step reads one embedding row, the layers, and the whole LM head.
  decode_weight_bytes_ += lm_head_.bytes() + size_t(H) * 4;
  set_kv_dtype(KvDtype::F32);  // lays out the pool's rows
}

size_t HybridModel::step_floats(int n, int logit_rows) const {
  size_t layer_max = 0;
  for (const Layer& L : layers_) {
    const size_t m = L.mixer->step_temp_floats(n, attn_), f = L.ffn->temp_floats(n);
    layer_max = std::max({layer_max, m, f});
  }
  const size_t H = size_t(cfg_.hidden_size);
  // x, h, per-token seq/pos, logits-row hidden states, and the layer temporaries
  return 2 * size_t(n) * H + 2 * size_t(n) + size_t(logit_rows) * H + layer_max + 16 * 64;
}

void HybridModel::set_kv_dtype(KvDtype t) {
  DS_CHECK(!allocated_, "the KV cache dtype is fixed once the runtime is allocated");
  kv_dtype_ = t;
  kv_bytes_per_token_ = 0;
  for (Layer& L : layers_) {
    const size_t row = L.mixer->kv_row_bytes(t);
    if (row == 0) continue;
    L.kv_offset = kv_bytes_per_token_;
    kv_bytes_per_token_ += row;
  }
}

void HybridModel::set_activation_dtype(ActivationDtype a) {
  activation_dtype_ = a;
  for (Layer& L : layers_) {
    L.mixer->set_activation_dtype(a);
    L.ffn->set_activation_dtype(a);
  }
  ds::set_activation_dtype(lm_head_, a);
}

void HybridModel::set_hidden_taps(const std::vector<int>& layers, int tail_rows) {
  DS_CHECK(!allocated_, "hidden taps are set before the runtime is allocated");
  DS_CHECK(tail_rows > 0, "hidden taps: tail_rows must be positive");
  DS_CHECK(!shard_.split(), "invalid settings: the parallel drafter shares the target's LM head, which --tp " +
                                std::to_string(shard_.size) + " splits across ranks: run it with --tp 1");
  tap_tail_ = tail_rows;
  tap_of_layer_.assign(size_t(cfg_.num_layers), -1);
  for (size_t i = 0; i < layers.size(); ++i) {
    const int l = layers[i];
    DS_CHECK(l >= 0 && l < cfg_.num_layers, "hidden tap: layer " + std::to_string(l) + " is outside the target's layers [0, " +
                                                std::to_string(cfg_.num_layers) + ")");
    DS_CHECK(tap_of_layer_[size_t(l)] < 0, "hidden tap: layer " + std::to_string(l) + " is listed twice");
    tap_of_layer_[size_t(l)] = int(i);
  }
  taps_ = layers;
}

void HybridModel::embed(std::span<const int32_t> ids, float* out) const {
  const int H = cfg_.hidden_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    DS_CHECK(ids[i] >= 0 && ids[i] < cfg_.vocab_size, "embed: token " + std::to_string(ids[i]) + " outside the vocabulary");
    row_to_f32(embed_.data(), embed_dtype_, size_t(ids[i]), H, out + i * size_t(H));
  }
}

void HybridModel::lm_head(const float* h, int rows, float* logits) const {
  DS_CHECK(!shard_.split(), "the LM head is split across ranks here: a drafter that shares it runs with --tp 1");
  if (rows > 0) matmul(h, size_t(cfg_.hidden_size), lm_head_, logits, size_t(cfg_.vocab_size), rows, pool_.get());
}

void HybridModel::allocate(const RuntimeLimits& limits) {
  DS_CHECK(!allocated_, "model runtime already allocated");
  DS_CHECK(limits.max_seqs > 0 && limits.max_batch_tokens > 0 && limits.max_logit_rows > 0 &&
               limits.num_kv_blocks > 0 && limits.block_size > 0,
           "runtime limits must all be positive");
  DS_CHECK(limits.spec_positions >= 0 && limits.spec_positions <= 64, "speculative positions must be in [0, 64]");
  limits_ = limits;
  DS_CHECK(limits.block_size % shard_.dcp == 0, "decode context parallel: --dcp " + std::to_string(shard_.dcp) +
                                                    " does not divide the block size " + std::to_string(limits.block_size));
  const int max_ctx = limits.num_kv_blocks * limits.block_size;
  kv_pool_ = allocate_large(std::max<size_t>(1, kv_bytes_per_block(limits.block_size) * size_t(limits.num_kv_blocks)));
  const size_t state_bytes = state_floats_per_slot_ * size_t(limits.max_seqs) * sizeof(float);
  states_mem_ = allocate_large(std::max<size_t>(state_bytes, 1));
  states_ = reinterpret_cast<float*>(states_mem_.get());
  std::memset(states_, 0, state_bytes);
  rollback_.assign(rollback_bytes_per_slot() / 4 * size_t(limits.max_seqs), 0.f);
  tap_rows_.assign(size_t(limits.max_batch_tokens) * taps_.size() * size_t(cfg_.hidden_size), 0.f);
  if (shard_.split()) {
    const size_t part = size_t(limits.max_logit_rows) * size_t(cfg_.vocab_size / shard_.size);
    lm_part_.assign(part, 0.f);
    if (shard_.rank == 0) lm_all_.assign(part * size_t(shard_.size), 0.f);
  }
  arena_.reserve(step_floats(limits.max_batch_tokens, limits.max_logit_rows) * sizeof(float));
  size_t scratch = 0;
  for (const Layer& L : layers_) scratch = std::max(scratch, L.mixer->step_scratch_floats(max_ctx, attn_));
  thread_scratch_.assign(size_t(pool_->size()), std::vector<float>(scratch + 64));
  allocated_ = true;
}

void HybridModel::forward(const ForwardBatch& batch, float* logits) {
  DS_CHECK(allocated_, "model runtime not allocated: call allocate() first");
  const int N = int(batch.tokens.size());
  int logit_rows = 0;
  for (const SeqChunk& sc : batch.seqs) {
    logit_rows += sc.num_logits;
    DS_CHECK(sc.slot >= 0 && sc.slot < limits_.max_seqs, "forward: state slot " + std::to_string(sc.slot) + " outside [0, " + std::to_string(limits_.max_seqs) + ")");
    DS_CHECK(sc.num_tokens > 0 && sc.token_offset >= 0 && sc.token_offset + sc.num_tokens <= N,
             "forward: chunk token range outside the batch");
    DS_CHECK(sc.num_logits == 0 || sc.num_logits == 1 || sc.num_logits == sc.num_tokens,
             "forward: num_logits must be 0, 1 or num_tokens");
    if (sc.spec_lane >= 0) {
      DS_CHECK(sc.spec_lane + sc.num_tokens <= limits_.spec_positions,
               "forward: speculative chunk at lane " + std::to_string(sc.spec_lane) + " with " +
                   std::to_string(sc.num_tokens) + " tokens, but the runtime keeps " +
                   std::to_string(limits_.spec_positions) + " positions");
      DS_CHECK(sc.start_pos > 0, "forward: a speculative chunk cannot start a sequence");
      DS_CHECK(limits_.rollback == StateRollback::Lanes || sc.spec_lane == 0,
               "forward: replay keeps one speculative chunk per step (spec_lane 0)");
    }
  }
  DS_CHECK(N > 0 && N <= limits_.max_batch_tokens, "forward: " + std::to_string(N) + " tokens, limit " + std::to_string(limits_.max_batch_tokens));
  DS_CHECK(logit_rows <= limits_.max_logit_rows, "forward: " + std::to_string(logit_rows) + " logit rows, limit " + std::to_string(limits_.max_logit_rows));
  for (int32_t t : batch.tokens)
    DS_CHECK(t >= 0 && t < cfg_.vocab_size, "forward: token id " + std::to_string(t) + " outside [0, " + std::to_string(cfg_.vocab_size) + ")");

  arena_.reset();
  const int H = cfg_.hidden_size;
  float* x = arena_.alloc<float>(size_t(N) * size_t(H));
  float* h = arena_.alloc<float>(size_t(N) * size_t(H));
  int32_t* tok_seq = arena_.alloc<int32_t>(size_t(N));
  int32_t* tok_pos = arena_.alloc<int32_t>(size_t(N));
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqChunk& sc = batch.seqs[s];
    for (int i = 0; i < sc.num_tokens; ++i) {
      tok_seq[sc.token_offset + i] = int32_t(s);
      tok_pos[sc.token_offset + i] = sc.start_pos + i;
    }
  }
  profile_ = ForwardProfile{};
  double kv_attention = 0;
  StepContext ctx{&batch, N, tok_seq, tok_pos, pool_.get(), &arena_, &thread_scratch_, &kv_attention, &attn_};
  using Clock = std::chrono::steady_clock;
  auto last_mark = Clock::now();
  // Adds the time since the last mark to `part`.
  auto mark_part = [&](ForwardProfile::Part part) {
    const auto now = Clock::now();
    profile_.seconds[part] += std::chrono::duration<double>(now - last_mark).count();
    last_mark = now;
  };
  parallel_rows(pool_.get(), N, H, [&](int t, int) {
    row_to_f32(embed_.data(), embed_dtype_, size_t(batch.tokens[size_t(t)]), H, x + size_t(t) * size_t(H));
  });
  mark_part(ForwardProfile::Embed);
  // Each attention layer owns a contiguous region [num_kv_blocks][block_size][row] of the pool
  // (block_size / dcp rows per block under decode context parallel).
  const int kv_block = limits_.block_size / shard_.dcp;
  const size_t layer_scale = size_t(kv_block) * size_t(limits_.num_kv_blocks);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    const size_t mark = arena_.mark();
    parallel_rows(pool_.get(), N, H, [&](int t, int) {
      rmsnorm(x + size_t(t) * size_t(H), L.input_norm.data(), cfg_.rms_norm_eps, h + size_t(t) * size_t(H), H);
    });
    mark_part(ForwardProfile::Norms);
    // A shard adds its partial output to zeros (rank 0: to the residual); the sum over ranks
    // is the whole layer's residual update.
    if (shard_.split() && shard_.rank != 0) std::memset(x, 0, size_t(N) * size_t(H) * sizeof(float));
    LayerMemory mem;
    if (L.mixer->state_floats() > 0) {
      mem.states = states_ + L.state_offset;
      mem.slot_stride = state_floats_per_slot_;
      RollbackArea& rb = mem.rollback;
      rb.mode = limits_.rollback;
      rb.positions = limits_.spec_positions;
      if (rb.positions > 0) {
        const bool lanes = rb.mode == StateRollback::Lanes;
        rb.base = rollback_.data() + (lanes ? L.state_offset : L.replay_offset);
        rb.stride = lanes ? state_floats_per_slot_ : replay_floats_per_token_;
      }
    } else {
      mem.kv = kv_pool_.get() + L.kv_offset * layer_scale;
      mem.block_size = kv_block;
      mem.kv_dtype = kv_dtype_;
    }
    L.mixer->forward(ctx, h, x, mem);
    mark_part(L.mixer->profile_part());
    if (kv_attention > 0) {  // the mixer's KV-cache attention, out of its own part
      profile_.seconds[L.mixer->profile_part()] -= kv_attention;
      profile_.seconds[ForwardProfile::KvAttention] += kv_attention;
      kv_attention = 0;
    }
    arena_.rewind(mark);
    reduce_residual(x, N, mark_part);
    parallel_rows(pool_.get(), N, H, [&](int t, int) {
      rmsnorm(x + size_t(t) * size_t(H), L.post_norm.data(), cfg_.rms_norm_eps, h + size_t(t) * size_t(H), H);
    });
    mark_part(ForwardProfile::Norms);
    if (shard_.split() && shard_.rank != 0) std::memset(x, 0, size_t(N) * size_t(H) * sizeof(float));
    L.ffn->forward(ctx, h, x);
    mark_part(L.ffn->profile_part());
    arena_.rewind(mark);
    reduce_residual(x, N, mark_part);
    if (!taps_.empty() && tap_of_layer_[li] >= 0) {
      const size_t T = taps_.size(), at = size_t(tap_of_layer_[li]);
      for (const SeqChunk& sc : batch.seqs)
        for (int t = sc.token_offset + std::max(0, sc.num_tokens - tap_tail_); t < sc.token_offset + sc.num_tokens; ++t)
          std::memcpy(tap_rows_.data() + (size_t(t) * T + at) * size_t(H), x + size_t(t) * size_t(H), size_t(H) * sizeof(float));
    }
  }
  // Final norm and LM head only for the rows whose logits were asked for.
  float* hl = arena_.alloc<float>(size_t(std::max(logit_rows, 1)) * size_t(H));
  int r = 0;
  for (const SeqChunk& sc : batch.seqs) {
    const int first = sc.num_logits == 1 ? sc.token_offset + sc.num_tokens - 1 : sc.token_offset;
    for (int i = 0; i < sc.num_logits; ++i, ++r)
      rmsnorm(x + size_t(first + i) * size_t(H), final_norm_.data(), cfg_.rms_norm_eps, hl + size_t(r) * size_t(H), H);
  }
  if (!shard_.split()) {
    // (Decode context parallel alone: every rank holds the whole head; only rank 0, which
    // samples, is given logits to fill.)
    if (logit_rows > 0 && logits) matmul(hl, size_t(H), lm_head_, logits, size_t(cfg_.vocab_size), logit_rows, pool_.get());
    mark_part(ForwardProfile::LmHead);
    return;
  }
  // Each shard scores its vocabulary rows; rank 0 gathers them into whole rows for the sampler.
  const size_t V = size_t(cfg_.vocab_size / shard_.size);
  if (logit_rows > 0) matmul(hl, size_t(H), lm_head_, lm_part_.data(), V, logit_rows, pool_.get());
  mark_part(ForwardProfile::LmHead);
  if (logit_rows == 0) return;
  const size_t part = size_t(logit_rows) * V;
  comm_->gather(lm_part_.data(), part, lm_all_.data());
  if (shard_.rank == 0)
    for (int rank = 0; rank < shard_.size; ++rank)
      for (int row = 0; row < logit_rows; ++row)
        std::memcpy(logits + size_t(row) * size_t(cfg_.vocab_size) + size_t(rank) * V,
                    lm_all_.data() + size_t(rank) * part + size_t(row) * V, V * sizeof(float));
  mark_part(ForwardProfile::RankComm);
}

size_t HybridModel::rollback_bytes_per_slot() const {
  const size_t per = limits_.rollback == StateRollback::Lanes ? state_floats_per_slot_ : replay_floats_per_token_;
  return per * size_t(limits_.spec_positions) * 4;
}

void HybridModel::commit_speculative(int slot, int keep) {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "commit_speculative: bad slot " + std::to_string(slot));
  DS_CHECK(keep >= 0 && keep <= limits_.spec_positions,
           "commit_speculative: keep " + std::to_string(keep) + " outside [0, " + std::to_string(limits_.spec_positions) + "]");
  if (keep == 0 || state_floats_per_slot_ == 0) return;
  float* st = states_ + size_t(slot) * state_floats_per_slot_;
  const size_t positions = size_t(limits_.spec_positions);
  if (limits_.rollback == StateRollback::Lanes) {
    // The lane after the last accepted token is the committed state now.
    const float* lane = rollback_.data() + (size_t(slot) * positions + size_t(keep - 1)) * state_floats_per_slot_;
    // Every thread copies a share: the lane was written a whole verify step ago, the step's
    // weight reads have pushed it out to memory, and one core reads memory at about half the
    // machine's bandwidth (2 MB per sequence on bench-100m: the round's commit phase).
    // 16 KiB pieces, shared out whenever there are two: small enough that the test models'
    // commits (tiny-hybrid: 8k floats) take this path too.
    constexpr size_t kChunk = size_t(4) << 10;  // floats
    const size_t n = state_floats_per_slot_;
    parallel_items(pool_.get(), int((n + kChunk - 1) / kChunk), [&](int i, int) {
      const size_t b = size_t(i) * kChunk, e = std::min(n, b + kChunk);
      std::memcpy(st + b, lane + b, (e - b) * 4);
    }, kParallelMinWork);
    return;
  }
  const float* entries = rollback_.data() + size_t(slot) * positions * replay_floats_per_token_;
  const std::vector<const Layer*>& rec = recurrent_layers_;
  for (const Layer* L : rec) L->mixer->replay_prepare(st + L->state_offset, entries + L->replay_offset, replay_floats_per_token_, keep);
  if (rec.empty()) return;
  // Every recurrent layer's items (KDA: its heads), as many in each.
  const int items = rec[0]->mixer->replay_items();
  parallel_items(pool_.get(), int(rec.size()) * items, [&](int item, int thread) {
    const Layer* L = rec[size_t(item / items)];
    L->mixer->replay_item(st + L->state_offset, entries + L->replay_offset, replay_floats_per_token_, keep, item % items,
                          thread_scratch_[size_t(thread)].data());
  }, rec[0]->mixer->replay_item_work(keep));
}

void HybridModel::save_state(int slot, void* dst) const {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "save_state: bad slot " + std::to_string(slot));
  if (state_floats_per_slot_ == 0) return;  // no recurrent layers: nothing to copy (dst may be null)
  std::memcpy(dst, states_ + size_t(slot) * state_floats_per_slot_, state_floats_per_slot_ * 4);
}

void HybridModel::load_state(int slot, const void* src) {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "load_state: bad slot " + std::to_string(slot));
  if (state_floats_per_slot_ == 0) return;
  std::memcpy(states_ + size_t(slot) * state_floats_per_slot_, src, state_floats_per_slot_ * 4);
}

// Block b of attention layer L: bytes [b * bs * row_L, (b + 1) * bs * row_L) of its region.
// Calls f(pointer, bytes) for each attention layer in order: the layout of a saved block.
template <typename F>
void HybridModel::for_each_block_span(int block, F&& f) const {
  DS_CHECK(allocated_ && block >= 0 && block < limits_.num_kv_blocks, "KV block " + std::to_string(block) + " outside the pool");
  const size_t bs = size_t(limits_.block_size / shard_.dcp), scale = bs * size_t(limits_.num_kv_blocks);
  for (const Layer& L : layers_) {
    const size_t row = L.mixer->kv_row_bytes(kv_dtype_);
    if (row == 0) continue;
    f(kv_pool_.get() + L.kv_offset * scale + size_t(block) * bs * row, bs * row);
  }
}

void HybridModel::save_block(int block, void* dst) const {
  auto* out = static_cast<std::byte*>(dst);
  for_each_block_span(block, [&](const std::byte* p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  });
}

void HybridModel::load_block(int block, const void* src) {
  const auto* in = static_cast<const std::byte*>(src);
  for_each_block_span(block, [&](std::byte* p, size_t n) {
    std::memcpy(p, in, n);
    in += n;
  });
}

}  // namespace

namespace {
void check_model_path(const std::string& path) {
  DS_CHECK(std::filesystem::exists(path), "model '" + path + "' does not exist");
  DS_CHECK(std::filesystem::is_directory(path) || is_gguf_model(path), "model '" + path + "' is neither a folder nor a GGUF file");
}
}  // namespace

void Model::set_hidden_taps(const std::vector<int>& layers, int) {
  DS_CHECK(layers.empty(), "this model does not expose hidden states to a drafter");
}
void Model::embed(std::span<const int32_t>, float*) const { throw Error("this model does not share its embedding"); }
void Model::lm_head(const float*, int, float*) const { throw Error("this model does not share its LM head"); }

std::unique_ptr<Model> Model::load(const std::string& dir, int threads) {
  check_model_path(dir);
  return std::make_unique<HybridModel>(dir, std::make_shared<ThreadPool>(threads > 0 ? threads : default_thread_count()));
}

std::unique_ptr<Model> Model::load_shard(const std::string& dir, int threads, TensorShard shard,
                                         std::shared_ptr<Collectives> comm, std::shared_ptr<Collectives> dcp_comm) {
  check_model_path(dir);
  DS_CHECK(!is_gguf_model(dir) || !shard.split(), "tensor parallel loads a model folder (safetensors), not a GGUF file");
  return std::make_unique<HybridModel>(dir, std::make_shared<ThreadPool>(threads > 0 ? threads : default_thread_count()),
                                       shard, std::move(comm), std::move(dcp_comm));
}

std::unique_ptr<Model> Model::load_sharing_threads(const std::string& dir, const Model& other) {
  check_model_path(dir);
  std::shared_ptr<ThreadPool> pool = other.thread_pool();
  DS_CHECK(pool != nullptr, "load_sharing_threads: the other model has no thread pool");
  return std::make_unique<HybridModel>(dir, std::move(pool));
}

}  // namespace ds
