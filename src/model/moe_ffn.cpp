#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "core/work_sharing.h"

namespace ds {

MoeFfn::MoeFfn(const ModelConfig& c, const WeightLoader& w) : m_(c.moe), hidden_(c.hidden_size) {
  const int E = m_.num_experts, I = m_.intermediate_size;
  router_ = w.linear("block_sparse_moe.gate.weight", E, hidden_);
  if (w.store.find(w.prefix + "block_sparse_moe.gate.e_score_correction_bias"))
    bias_ = w.vector_f32("block_sparse_moe.gate.e_score_correction_bias", E);
  else
    bias_.assign(size_t(E), 0.f);
  // Expert parallel: a split shard holds experts [e0, e1) only; the router still scores all.
  first_expert_ = E / w.shard.size * w.shard.rank;
  end_expert_ = first_expert_ + E / w.shard.size;
  for (int e = first_expert_; e < end_expert_; ++e) {
    const std::string p = "block_sparse_moe.experts." + std::to_string(e) + ".";
    w13_.push_back(w.stacked({{p + "w1.weight", I}, {p + "w3.weight", I}}, hidden_));
    w2_.push_back(w.linear(p + "w2.weight", hidden_, I));
  }
  if (m_.num_shared_experts > 0)
    shared_.emplace_back(w, "block_sparse_moe.shared_experts.gate_proj.weight",
                         "block_sparse_moe.shared_experts.up_proj.weight",
                         "block_sparse_moe.shared_experts.down_proj.weight", hidden_, I * m_.num_shared_experts / w.shard.size);
}

size_t MoeFfn::temp_floats(int n) const {
  const size_t I = size_t(m_.intermediate_size);
  const size_t k = size_t(m_.experts_per_token);
  const size_t shared = shared_.empty() ? 0 : shared_[0].temp_floats(n);
  // logits + routing, row ids and weights, expert offsets and order, then the experts' rows:
  // gathered input, gate/up, activation and output, for every (token, expert) pair at once
  // when experts run side by side (at most kSideBySideMaxPairs), else for one expert's (at
  // most n) at a time.
  const size_t expert_rows = std::max(size_t(n), std::min(size_t(n) * k, size_t(kSideBySideMaxPairs)));
  return size_t(n) * (size_t(m_.num_experts) + 2 * k) + size_t(n) * k * 2 + 2 * size_t(m_.num_experts) +
         expert_rows * (size_t(hidden_) * 2 + 3 * I) + shared + 16 * 64;
}

size_t MoeFfn::weight_bytes() const {
  size_t b = router_.bytes() + bias_.size() * 4;
  for (auto& w : w13_) b += w.bytes();
  for (auto& w : w2_) b += w.bytes();
  for (auto& s : shared_) b += s.weight_bytes();
  return b;
}

size_t MoeFfn::decode_weight_bytes() const {
  size_t routed = 0;
  for (size_t e = 0; e < w13_.size(); ++e) routed += w13_[e].bytes() + w2_[e].bytes();
  // The top-k's share of this shard's experts (all of them in one process).
  size_t b = router_.bytes() + routed / size_t(m_.num_experts) * size_t(m_.experts_per_token);
  for (auto& s : shared_) b += s.weight_bytes();
  return b;
}

void MoeFfn::route(const float* logits, int32_t* ids, float* weights) const {
  const int E = m_.num_experts, k = m_.experts_per_token;
  float score[1024], biased[1024];
  bool allowed[1024];
  for (int e = 0; e < E; ++e) {
    score[e] = sigmoidf(logits[e]);
    biased[e] = score[e] + bias_[size_t(e)];
    allowed[e] = true;
  }
  if (m_.use_grouped_topk && m_.num_expert_group > 1) {
    // A group's score is the sum of its two best biased scores; keep the topk_group best groups.
    const int G = m_.num_expert_group, per = E / G;
    float gscore[1024];
    for (int g = 0; g < G; ++g) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        if (biased[e] > b1) { b2 = b1; b1 = biased[e]; }
        else if (biased[e] > b2) b2 = biased[e];
      }
      gscore[g] = b1 + (per > 1 ? b2 : 0.f);
    }
    bool keep[1024] = {};
    for (int r = 0; r < m_.topk_group; ++r) {
      int best = -1;
      for (int g = 0; g < G; ++g)
        if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
      keep[best] = true;
    }
    for (int e = 0; e < E; ++e) allowed[e] = keep[e / per];
  }
  float sum = 0.f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (allowed[e] && (best < 0 || biased[e] > biased[best])) best = e;
    allowed[best] = false;
    ids[j] = best;
    weights[j] = score[best];
    sum += score[best];
  }
  const float norm = m_.renormalize && sum > 0.f ? 1.f / sum : 1.f;
  for (int j = 0; j < k; ++j) weights[j] *= norm * m_.routed_scaling_factor;
}

void MoeFfn::forward(const StepContext& ctx, const float* h, float* x) const {
  const int N = ctx.num_tokens, E = m_.num_experts, k = m_.experts_per_token;
  const int I = m_.intermediate_size;
  Arena& arena = *ctx.arena;
  float* logits = arena.alloc<float>(size_t(N) * size_t(E));
  int32_t* ids = arena.alloc<int32_t>(size_t(N) * size_t(k));
  float* wts = arena.alloc<float>(size_t(N) * size_t(k));
  matmul(h, size_t(hidden_), router_, logits, size_t(E), N, ctx.pool);
  for (int t = 0; t < N; ++t)
    route(logits + size_t(t) * size_t(E), ids + size_t(t) * size_t(k), wts + size_t(t) * size_t(k));
  // Group (token, weight) pairs by expert, in token order within each; each expert runs once
  // over its rows.
  const int L = end_expert_ - first_expert_;
  const size_t P = size_t(N) * size_t(k);
  int32_t* rows = arena.alloc<int32_t>(P);
  float* row_w = arena.alloc<float>(P);
  int32_t* first = arena.alloc<int32_t>(size_t(L) + 1);  // expert e's pairs: [first[e], first[e + 1])
  int32_t* order = arena.alloc<int32_t>(size_t(L));
  int n = 0;
  for (int e = first_expert_; e < end_expert_; ++e) {
    first[e - first_expert_] = n;
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < k; ++j)
        if (ids[size_t(t) * size_t(k) + size_t(j)] == e) {
          rows[n] = t;
          row_w[n] = wts[size_t(t) * size_t(k) + size_t(j)];
          ++n;
        }
  }
  first[L] = n;
  int active = 0;
  for (int e = 0; e < L; ++e)
    if (first[e + 1] > first[e]) order[active++] = e;
  // Decode and verify steps (a few rows per expert): whole experts per thread, the largest
  // first, each reading its weights on one core while the other core reads another's, every
  // pair with buffers of its own. Split expert by expert instead, each expert's small matmuls
  // were a fork-join apiece with the gathers, SiLU and sums serial between them: the pool's
  // worker spun through 15% of a concurrency-16 step of bench-100m. Prefill-sized groups keep
  // the split and one expert's buffers (one thread per expert would leave the largest expert's
  // tail to one core, and all pairs' buffers at once would be k times the rows).
  const bool side_by_side = ctx.pool && ctx.pool->size() > 1 && active > 1 && P <= size_t(kSideBySideMaxPairs);
  const size_t buffer_rows = side_by_side ? P : size_t(N);
  float* Xe = arena.alloc<float>(buffer_rows * size_t(hidden_));
  float* GU = arena.alloc<float>(buffer_rows * size_t(2 * I));
  float* A = arena.alloc<float>(buffer_rows * size_t(I));
  float* Ye = arena.alloc<float>(buffer_rows * size_t(hidden_));
  // Expert `local` over its rows, into buffers from row `at`; then, with `pool`, its matmuls split.
  auto run_expert = [&](int local, size_t at, ThreadPool* pool) {
    const int r0 = first[local], m = first[local + 1] - r0;
    float* xe = Xe + at * size_t(hidden_);
    float* gu = GU + at * size_t(2 * I);
    float* a = A + at * size_t(I);
    for (int r = 0; r < m; ++r)
      std::memcpy(xe + size_t(r) * size_t(hidden_), h + size_t(rows[r0 + r]) * size_t(hidden_), size_t(hidden_) * sizeof(float));
    matmul(xe, size_t(hidden_), w13_[size_t(local)], gu, size_t(2 * I), m, pool);
    for (int r = 0; r < m; ++r)
      silu_mul(gu + size_t(r) * size_t(2 * I), gu + size_t(r) * size_t(2 * I) + I, a + size_t(r) * size_t(I), I);
    matmul(a, size_t(I), w2_[size_t(local)], Ye + at * size_t(hidden_), size_t(hidden_), m, pool);
  };
  // Each token's sum in expert order either way, so the result does not depend on the path.
  auto add_expert = [&](int local, size_t at) {
    for (int r = first[local]; r < first[local + 1]; ++r)
      axpy(row_w[r], Ye + (at + size_t(r - first[local])) * size_t(hidden_), x + size_t(rows[r]) * size_t(hidden_), hidden_);
  };
  if (side_by_side) {
    std::sort(order, order + active, [&](int32_t a, int32_t b) {
      const int na = first[a + 1] - first[a], nb = first[b + 1] - first[b];
      return na != nb ? na > nb : a < b;
    });
    parallel_items(ctx.pool, active, [&](int i, int) { run_expert(order[i], size_t(first[order[i]]), nullptr); }, kParallelMinWork);
    for (int e = 0; e < L; ++e) add_expert(e, size_t(first[e]));
  } else {
    for (int i = 0; i < active; ++i) {
      run_expert(order[i], 0, ctx.pool);
      add_expert(order[i], 0);
    }
  }
  for (auto& s : shared_) s.forward(ctx, h, x, N);
}

}  // namespace ds
