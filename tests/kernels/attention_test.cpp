#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
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
