// Decode context parallel's merge on its own (no ranks): token i of a context lives with rank
// i mod D in that rank's own paged layout (block_size / D rows per block, the same block
// table); each rank attends its rows with attention_decode and its log-sum-exp, and the exact
// merge of the D partials is the single-rank attention. model/dcp_attention.cpp does exactly
// this across processes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace ds {
namespace {

TEST(DcpMerge, RankPartialsMergeToTheSingleRankAttention) {
  const int nq = 4, dk = 48, dv = 32, bs = 64, row = dk + dv;
  for (int D : {2, 4}) {
    for (int n_ctx : {1, 63, 64, 65, 5000}) {
      const int blocks = (n_ctx + bs - 1) / bs;
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      for (int b = 0; b < blocks; ++b) table[size_t(b)] = (b * 5 + 2) % (blocks + 3);  // shuffled
      std::mt19937 rng(uint32_t(n_ctx * 10 + D));
      std::normal_distribution<float> nd;
      std::vector<float> whole(size_t(blocks + 3) * bs * row);
      for (float& x : whole) x = nd(rng);
      std::vector<float> q(size_t(nq) * dk);
      for (float& x : q) x = nd(rng);
      const PagedKv all = PagedKv::f32(whole.data(), whole.data() + dk, size_t(bs) * row, size_t(row), bs, table.data());
      // Each rank's pool: block b's rows for its positions, at (pos % bs) / D.
      const int lbs = bs / D;
      std::vector<std::vector<float>> pools(size_t(D), std::vector<float>(size_t(blocks + 3) * lbs * row));
      for (int pos = 0; pos < n_ctx; ++pos) {
        const int r = pos % D, local = pos / D;
        const float* src = whole.data() + all.offset(pos) / sizeof(float);
        float* dst = pools[size_t(r)].data() + size_t(table[size_t(local / lbs)]) * lbs * row + size_t(local % lbs) * row;
        std::copy(src, src + row, dst);
      }
      std::vector<float> parts(size_t(D) * nq * dv), lses(size_t(D) * nq, -INFINITY);
      for (int r = 0; r < D; ++r) {
        const int n_local = n_ctx > r ? (n_ctx - r + D - 1) / D : 0;
        if (n_local == 0) continue;  // this rank holds none of the context: weight 0
        const PagedKv mine = PagedKv::f32(pools[size_t(r)].data(), pools[size_t(r)].data() + dk, size_t(lbs) * row, size_t(row),
                                          lbs, table.data());
        std::vector<float> scratch(attention_scratch_floats(nq, dv, n_local));
        attention_decode(q.data(), nq, dk, dv, 0.2f, mine, n_local, parts.data() + size_t(r) * nq * dv, scratch.data(),
                         nullptr, 0, lses.data() + size_t(r) * nq);
      }
      std::vector<float> merged(size_t(nq) * dv), single(size_t(nq) * dv), ref(size_t(nq) * dv);
      merge_partitions(parts.data(), lses.data(), D, nq, dv, merged.data(), nullptr);
      std::vector<float> scratch(attention_scratch_floats(nq, dv, n_ctx));
      attention_decode(q.data(), nq, dk, dv, 0.2f, all, n_ctx, single.data(), scratch.data());
      attention_reference(q.data(), nq, dk, dv, 0.2f, all, n_ctx, ref.data());
      // Rounding only: the ranks' partitions differ from one rank's, so the sums run in another
      // order (measured: at most a few 1e-7 at 5000 tokens).
      for (size_t i = 0; i < merged.size(); ++i) {
        ASSERT_NEAR(merged[i], single[i], 2e-6f) << "D " << D << " n_ctx " << n_ctx << " i " << i;
        ASSERT_NEAR(merged[i], ref[i], 2e-5f) << "D " << D << " n_ctx " << n_ctx << " i " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ds
