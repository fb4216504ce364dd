// The Model implementation for both model types: embeddings, the layer stack (each layer a
// mixer and an FFN behind model/mixer.h and model/ffn.h, made by model/layer_registry.h), final
// norm and LM head. The runtime memory (KV pool, state slots, rollback, taps) is a ModelMemory
// beside the layers (model/model_memory.h); the step's arena and scratch are sized here.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "model/layer_registry.h"
#include "model/model_files.h"
#include "model/model_memory.h"
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
};

class HybridModel final : public Model {
 public:
  HybridModel(const std::string& dir, std::shared_ptr<ThreadPool> pool, TensorShard shard = {},
              std::shared_ptr<Collectives> comm = nullptr, std::shared_ptr<Collectives> dcp_comm = nullptr);
  std::shared_ptr<ThreadPool> thread_pool() const override { return pool_; }

  const ModelConfig& config() const override { return cfg_; }
  // The cache's memory is the ModelMemory's: these pass through.
  size_t kv_bytes_per_block(int block_size) const override { return memory_->kv_bytes_per_block(block_size); }
  void set_kv_dtype(KvDtype t) override { memory_->set_kv_dtype(t); }
  KvDtype kv_dtype() const override { return memory_->kv_dtype(); }
  void set_activation_dtype(ActivationDtype a) override;
  ActivationDtype activation_dtype() const override { return activation_dtype_; }
  size_t state_bytes_per_slot() const override { return memory_->state_bytes_per_slot(); }
  size_t weights_bytes() const override { return weights_bytes_; }
  uint64_t weights_fingerprint() const override { return fingerprint_; }
  size_t decode_weight_bytes() const override { return decode_weight_bytes_; }
  void allocate(const RuntimeLimits& limits) override;
  const RuntimeLimits& limits() const override { return memory_->limits(); }
  void forward(const ForwardBatch& batch, float* logits) override;
  void save_state(int slot, void* dst) const override { memory_->save_state(slot, dst); }
  void load_state(int slot, const void* src) override { memory_->load_state(slot, src); }
  void save_block(int block, void* dst) const override { memory_->save_block(block, dst); }
  void load_block(int block, const void* src) override { memory_->load_block(block, src); }
  void commit_speculative(int slot, int keep) override {
    memory_->commit_speculative(slot, keep, pool_.get(), thread_scratch_);
  }
  size_t rollback_bytes_per_slot() const override { return memory_->rollback_bytes_per_slot(); }
  const ForwardProfile& last_profile() const override { return profile_; }
  void set_hidden_taps(const std::vector<int>& layers, int tail_rows) override;
  const float* hidden_taps() const override { return memory_->hidden_taps(); }
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
  std::vector<float> final_norm_;
  PackedWeight lm_head_;  // a shard: its vocab_size / shard.size rows
  std::vector<float> lm_part_, lm_all_;  // a shard's logits rows, and rank 0's gathered ones
  ActivationDtype activation_dtype_ = ActivationDtype::F32;
  size_t weights_bytes_ = 0, decode_weight_bytes_ = 0;
  uint64_t fingerprint_ = 0;

  // The runtime memory, laid out from the layers' mixers (which it points at).
  std::unique_ptr<ModelMemory> memory_;
  bool allocated_ = false;
  ForwardProfile profile_;
  // The step's temporaries, sized at allocate().
  Arena arena_;
  std::vector<std::vector<float>> thread_scratch_;
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
  WeightStore store = open_model_weights(dir);
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
    const size_t mixer_bytes = L.mixer->weight_bytes();
    L.ffn = make_ffn(cfg_.ffn[size_t(i)], local_, w);
    const size_t ffn_bytes = L.ffn->weight_bytes(), ffn_decode = L.ffn->decode_weight_bytes();
    weights_bytes_ += mixer_bytes + ffn_bytes + 2 * size_t(H) * 4;
    decode_weight_bytes_ += mixer_bytes + ffn_decode + 2 * size_t(H) * 4;
    layers_.push_back(std::move(L));
  }
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
  std::vector<const Mixer*> mixers;
  for (const Layer& L : layers_) mixers.push_back(L.mixer.get());
  memory_ = std::make_unique<ModelMemory>(std::move(mixers), H, shard_.dcp);  // KV rows in f32 until set
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
  memory_->set_hidden_taps(layers, tail_rows);
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
  memory_->allocate(limits);  // checks the limits
  const int max_ctx = limits.num_kv_blocks * limits.block_size;
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
  const RuntimeLimits& lim = memory_->limits();
  const int N = int(batch.tokens.size());
  int logit_rows = 0;
  for (const SeqChunk& sc : batch.seqs) {
    logit_rows += sc.num_logits;
    DS_CHECK(sc.slot >= 0 && sc.slot < lim.max_seqs, "forward: state slot " + std::to_string(sc.slot) + " outside [0, " + std::to_string(lim.max_seqs) + ")");
    DS_CHECK(sc.num_tokens > 0 && sc.token_offset >= 0 && sc.token_offset + sc.num_tokens <= N,
             "forward: chunk token range outside the batch");
    DS_CHECK(sc.num_logits == 0 || sc.num_logits == 1 || sc.num_logits == sc.num_tokens,
             "forward: num_logits must be 0, 1 or num_tokens");
    if (sc.spec_lane >= 0) {
      DS_CHECK(sc.spec_lane + sc.num_tokens <= lim.spec_positions,
               "forward: speculative chunk at lane " + std::to_string(sc.spec_lane) + " with " +
                   std::to_string(sc.num_tokens) + " tokens, but the runtime keeps " +
                   std::to_string(lim.spec_positions) + " positions");
      DS_CHECK(sc.start_pos > 0, "forward: a speculative chunk cannot start a sequence");
      DS_CHECK(lim.rollback == StateRollback::Lanes || sc.spec_lane == 0,
               "forward: replay keeps one speculative chunk per step (spec_lane 0)");
    }
  }
  DS_CHECK(N > 0 && N <= lim.max_batch_tokens, "forward: " + std::to_string(N) + " tokens, limit " + std::to_string(lim.max_batch_tokens));
  DS_CHECK(logit_rows <= lim.max_logit_rows, "forward: " + std::to_string(logit_rows) + " logit rows, limit " + std::to_string(lim.max_logit_rows));
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
    L.mixer->forward(ctx, h, x, memory_->layer(li));
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
    memory_->tap(li, batch, x);
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
