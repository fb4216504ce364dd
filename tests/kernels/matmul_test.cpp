#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace ds {
namespace {

struct Case { int m, n, k; DType dtype; };

void check(const Case& c, ThreadPool* pool, bool accumulate) {
  std::mt19937 rng(c.m * 131 + c.n * 7 + c.k);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(c.m) * c.k);
  for (auto& v : x) v = nd(rng);
  std::vector<uint16_t> w16(size_t(c.n) * c.k);
  std::vector<float> w32(size_t(c.n) * c.k);
  for (size_t i = 0; i < w32.size(); ++i) {
    w32[i] = nd(rng) * 0.1f;
    w16[i] = c.dtype == DType::BF16 ? f32_to_bf16(w32[i]) : f32_to_f16(w32[i]);
  }
  const void* src = c.dtype == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data();
  PackedWeight pw = pack_weight(src, c.dtype, c.n, c.k);
  const size_t ldy = size_t(c.n) + 3;  // a row stride wider than n must leave the gap alone
  std::vector<float> y(size_t(c.m) * ldy, 0.5f), ref(size_t(c.m) * c.n);
  matmul(x.data(), size_t(c.k), pw, y.data(), ldy, c.m, pool, accumulate);
  matmul_reference(x.data(), size_t(c.k), src, c.dtype, c.n, c.k, ref.data(), size_t(c.n), c.m);
  for (int r = 0; r < c.m; ++r) {
    for (int o = 0; o < c.n; ++o) {
      float want = ref[size_t(r) * c.n + o] + (accumulate ? 0.5f : 0.f);
      EXPECT_NEAR(y[size_t(r) * ldy + o], want, 1e-4f * std::sqrt(float(c.k)) + 1e-5f * std::fabs(want))
          << "m=" << c.m << " n=" << c.n << " k=" << c.k << " at " << r << "," << o;
    }
    for (size_t o = size_t(c.n); o < ldy; ++o) EXPECT_EQ(y[size_t(r) * ldy + o], 0.5f);
  }
}

TEST(Matmul, MatchesReferenceAcrossShapesAndDtypes) {
  ThreadPool pool(2);
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int m : {1, 2, 3, 5, 8, 9, 17, 64})
      for (auto nk : {std::pair{16, 16}, {33, 7}, {100, 65}, {257, 130}}) {
        check({m, nk.first, nk.second, dt}, &pool, false);
        check({m, nk.first, nk.second, dt}, nullptr, m % 2 == 1);
      }
}

TEST(Matmul, RowsAreIndependentOfBatchSize) {
  // Batch invariance rests on this: a row's result is bit-identical whatever rows share its step.
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int n = 96, k = 200;
  std::vector<uint16_t> w(size_t(n) * k);
  for (auto& v : w) v = f32_to_bf16(nd(rng));
  PackedWeight pw = pack_weight(w.data(), DType::BF16, n, k);
  std::vector<float> x(size_t(13) * k);
  for (auto& v : x) v = nd(rng);
  std::vector<float> all(size_t(13) * n), one(n);
  ThreadPool pool(2);
  matmul(x.data(), k, pw, all.data(), n, 13, &pool);
  for (int r = 0; r < 13; ++r) {
    matmul(x.data() + size_t(r) * k, k, pw, one.data(), n, 1, nullptr);
    for (int o = 0; o < n; ++o) ASSERT_EQ(one[o], all[size_t(r) * n + o]) << r << "," << o;
  }
}

TEST(Matmul, ThreadedSplitEqualsOneThreadAboveTheForkThreshold) {
  // matmul forks only at m * n * k >= 2^20 multiply-adds or a weight of 256 KiB or more
  // (kParallelMinMacs, kParallelMinBytes in matmul.cpp), so the test above never splits. These
  // shapes do, and are the real ones: bench-100m's 768-wide projections and 2048-wide FFN, for
  // one decode row and a small batch, and a key projection forked for its bytes alone. A row's
  // result must be bit-identical whether its panels are split across 2 or 3 threads or computed
  // on one, and whatever rows share the call (the 3-thread pool splits 2048 / 16 = 128 panels
  // unevenly).
  struct Shape { int n, k, m; };
  for (DType dt : {DType::BF16, DType::F32})
    for (const Shape s : {Shape{2048, 768, 1}, Shape{768, 2048, 1}, Shape{768, 768, 13}, Shape{1000, 300, 9}, Shape{256, 768, 1}}) {
      ASSERT_TRUE(double(s.m) * s.n * s.k >= double(1 << 20) || size_t(s.n) * s.k * dtype_size(dt) >= (size_t(256) << 10))
          << "below the fork thresholds";
      std::mt19937 rng(s.n + s.k + s.m);
      std::normal_distribution<float> nd;
      std::vector<float> w32(size_t(s.n) * s.k);
      std::vector<uint16_t> w16(w32.size());
      for (size_t i = 0; i < w32.size(); ++i) {
        w32[i] = nd(rng) * 0.05f;
        w16[i] = f32_to_bf16(w32[i]);
      }
      PackedWeight pw = dt == DType::BF16 ? pack_weight(w16.data(), dt, s.n, s.k) : pack_weight(w32.data(), dt, s.n, s.k);
      std::vector<float> x(size_t(s.m) * s.k);
      for (auto& v : x) v = nd(rng);
      std::vector<float> serial(size_t(s.m) * s.n), one(size_t(s.n));
      matmul(x.data(), size_t(s.k), pw, serial.data(), size_t(s.n), s.m, nullptr);
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> split(serial.size(), NAN);
        matmul(x.data(), size_t(s.k), pw, split.data(), size_t(s.n), s.m, &pool);
        for (size_t i = 0; i < split.size(); ++i)
          ASSERT_EQ(split[i], serial[i]) << "n=" << s.n << " k=" << s.k << " m=" << s.m << " threads=" << threads
                                         << " row " << i / size_t(s.n) << " col " << i % size_t(s.n);
      }
      // Each row alone (below the threshold when m > 1, so on one thread) equals its batched self.
      for (int r = 0; r < s.m; ++r) {
        matmul(x.data() + size_t(r) * s.k, size_t(s.k), pw, one.data(), size_t(s.n), 1, nullptr);
        for (int o = 0; o < s.n; ++o) ASSERT_EQ(one[size_t(o)], serial[size_t(r) * s.n + size_t(o)]) << r << "," << o;
      }
    }
}

}  // namespace
}  // namespace ds
