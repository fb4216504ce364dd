#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

namespace ds {
namespace {

TEST(Attention, SplitKvMergeMatchesNaive) {
  // A shuffled block table and a row wider than the key exercise the paging arithmetic.
  for (int n_ctx : {1, 37, 256, 257, 700, 1500}) {
    const int nq = 4, dk = 40, dv = 24, bs = 64, row = 72;
    const int blocks = (n_ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = (b * 7 + 3) % (blocks + 5);
    std::mt19937 rng(n_ctx);
    std::normal_distribution<float> nd;
    std::vector<float> pool(size_t(blocks + 5) * bs * row);
    for (auto& x : pool) x = nd(rng);
    PagedKv kv;
    kv.k = pool.data();
    kv.v = pool.data() + dk;  // values after the keys in the same row
    kv.block_stride = size_t(bs) * row;
    kv.token_stride = row;
    kv.block_size = bs;
    kv.block_table = table.data();
    std::vector<float> q(size_t(nq) * dk);
    for (auto& x : q) x = nd(rng);
    std::vector<float> out(size_t(nq) * dv), ref(size_t(nq) * dv);
    std::vector<float> scratch(attention_scratch_floats(nq, dv, n_ctx));
    attention_decode(q.data(), nq, dk, dv, 0.3f, kv, n_ctx, out.data(), scratch.data());
    attention_reference(q.data(), nq, dk, dv, 0.3f, kv, n_ctx, ref.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f) << "n_ctx=" << n_ctx << " i=" << i;
  }
}

TEST(Attention, MergeOfTwoHalvesEqualsWhole) {
  const int nq = 2, dk = 16, dv = 8, n = 300;
  std::vector<int32_t> table = {0, 1, 2, 3, 4};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> kp(size_t(5) * 64 * dk);
  for (auto& x : kp) x = nd(rng);
  // Values are the first dv entries of each key row, as in MLA's latent cache.
  PagedKv kv{kp.data(), kp.data(), size_t(64) * dk, size_t(dk), 64, table.data()};
  std::vector<float> q(size_t(nq) * dk);
  for (auto& x : q) x = nd(rng);
  std::vector<float> parts(size_t(2) * nq * dv), lses(size_t(2) * nq), scores(size_t(nq) * kAttnPartition);
  attention_partition(q.data(), nq, dk, dv, 0.25f, kv, 0, 100, parts.data(), lses.data(), scores.data());
  attention_partition(q.data(), nq, dk, dv, 0.25f, kv, 100, n, parts.data() + nq * dv, lses.data() + nq, scores.data());
  std::vector<float> out(size_t(nq) * dv), ref(size_t(nq) * dv);
  merge_partitions(parts.data(), lses.data(), 2, nq, dv, out.data(), nullptr);
  attention_reference(q.data(), nq, dk, dv, 0.25f, kv, n, ref.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(Attention, PrefillTilesMatchPerQueryReference) {
  // A chunk of T queries continuing a sequence that already holds `start` tokens.
  for (auto [start, T, nq] : {std::tuple{0, 1, 3}, {0, 70, 3}, {37, 100, 12}, {130, 5, 2}, {0, 129, 1}}) {
    const int dk = 40, dv = 24, bs = 64, row = 72;
    const int n_ctx = start + T, blocks = (n_ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = blocks - 1 - b;
    std::mt19937 rng(start * 100 + T);
    std::normal_distribution<float> nd;
    std::vector<float> pool(size_t(blocks) * bs * row);
    for (auto& x : pool) x = nd(rng);
    PagedKv kv{pool.data(), pool.data() + dk, size_t(bs) * row, size_t(row), bs, table.data()};
    const size_t q_stride = size_t(nq) * dk + 5, o_stride = size_t(nq) * dv + 3;
    std::vector<float> q(size_t(T) * q_stride);
    for (auto& x : q) x = nd(rng);
    std::vector<float> out(size_t(T) * o_stride), ref(size_t(nq) * dv);
    std::vector<float> scratch(attention_prefill_scratch_floats(nq, dk, dv));
    // Two calls splitting the chunk, as threads do.
    const int mid = T / 2;
    attention_prefill(q.data(), q_stride, 0, mid, start, nq, dk, dv, 0.2f, kv, out.data(), o_stride, scratch.data());
    attention_prefill(q.data(), q_stride, mid, T, start, nq, dk, dv, 0.2f, kv, out.data(), o_stride, scratch.data());
    for (int t = 0; t < T; ++t) {
      attention_reference(q.data() + size_t(t) * q_stride, nq, dk, dv, 0.2f, kv, start + t + 1, ref.data());
      for (int i = 0; i < nq * dv; ++i)
        ASSERT_NEAR(out[size_t(t) * o_stride + size_t(i)], ref[size_t(i)], 2e-5f) << "start=" << start << " T=" << T << " t=" << t;
    }
  }
}

}  // namespace
}  // namespace ds
