// BF16 weights meeting bf16 activations (PackedWeight::activations): the kernels against the
// double reference on the rounded activations, against each other bit for bit, and the batch
// invariance the engine's bit-identity guarantees rest on. Suite "Matmul", so tests/CMakeLists.txt
// runs them again under DS_ISA=avx2 and scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace ds {
namespace {

struct Weights {
  std::vector<uint16_t> bits;
  PackedWeight packed;
};

Weights bf16_weights(int n, int k, unsigned seed, float scale = 0.1f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Weights w;
  w.bits.resize(size_t(n) * size_t(k));
  for (auto& b : w.bits) b = f32_to_bf16(nd(rng) * scale);
  w.packed = pack_weight(w.bits.data(), DType::BF16, n, k);
  set_activation_dtype(w.packed, ActivationDtype::BF16);
  return w;
}

std::vector<float> activations(int m, int k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(m) * size_t(k));
  for (auto& v : x) v = nd(rng);
  return x;
}

TEST(Matmul, Bf16ActivationsMatchTheReferenceOnRoundedActivations) {
  ThreadPool pool(2);
  for (int m : {1, 2, 5, 8, 9, 17, 64})
    for (auto nk : {std::pair{16, 16}, {33, 7}, {100, 65}, {257, 130}, {48, 96}}) {
      const int n = nk.first, k = nk.second;
      Weights w = bf16_weights(n, k, unsigned(m * 31 + n + k));
      std::vector<float> x = activations(m, k, unsigned(m + 7 * k));
      std::vector<float> rounded(x.size());
      for (size_t i = 0; i < x.size(); ++i) rounded[i] = detail::round_to_bf16_exact(x[i]);
      std::vector<float> ref(size_t(m) * size_t(n));
      matmul_reference(rounded.data(), size_t(k), w.bits.data(), DType::BF16, n, k, ref.data(), size_t(n), m);
      for (bool accumulate : {false, true}) {
        const size_t ldy = size_t(n) + 5;  // the gap past n stays untouched
        std::vector<float> y(size_t(m) * ldy, 0.25f);
        matmul(x.data(), size_t(k), w.packed, y.data(), ldy, m, accumulate ? nullptr : &pool, accumulate);
        for (int r = 0; r < m; ++r) {
          for (int o = 0; o < n; ++o) {
            const float want = ref[size_t(r) * size_t(n) + size_t(o)] + (accumulate ? 0.25f : 0.f);
            // Only the f32 summation order differs from the reference (every product is exact).
            EXPECT_NEAR(y[size_t(r) * ldy + size_t(o)], want, 2e-6f * float(k) + 1e-6f * std::fabs(want))
                << "m=" << m << " n=" << n << " k=" << k << " at " << r << "," << o;
          }
          for (size_t o = size_t(n); o < ldy; ++o) EXPECT_EQ(y[size_t(r) * ldy + o], 0.25f);
        }
      }
    }
}

TEST(Matmul, Bf16ActivationsMoveResultsByTheRoundingOfTheActivations) {
  // What the option costs: the result against the exact f32-activation product is within the
  // activations' rounding (relative 2^-9 each), not more. A kernel that dropped the low bits of
  // a weight, or rounded twice, would land outside.
  const int n = 64, k = 512, m = 4;
  Weights w = bf16_weights(n, k, 3);
  PackedWeight exact = pack_weight(w.bits.data(), DType::BF16, n, k);
  std::vector<float> x = activations(m, k, 4);
  std::vector<float> y(size_t(m) * size_t(n)), y_exact(y.size());
  matmul(x.data(), size_t(k), w.packed, y.data(), size_t(n), m, nullptr);
  matmul(x.data(), size_t(k), exact, y_exact.data(), size_t(n), m, nullptr);
  double max_moved = 0;
  for (int r = 0; r < m; ++r)
    for (int o = 0; o < n; ++o) {
      double bound = 0;  // sum |x w| * 2^-9: the most the rounding can move this output
      for (int c = 0; c < k; ++c)
        bound += std::fabs(double(x[size_t(r) * size_t(k) + size_t(c)]) *
                           double(bf16_to_f32(w.bits[size_t(o) * size_t(k) + size_t(c)])));
      bound = bound * std::ldexp(1.0, -9) + 1e-5;
      const double moved = std::fabs(double(y[size_t(r) * size_t(n) + size_t(o)]) - y_exact[size_t(r) * size_t(n) + size_t(o)]);
      EXPECT_LE(moved, bound) << r << "," << o;
      max_moved = std::max(max_moved, moved);
    }
  EXPECT_GT(max_moved, 0.0) << "the rounding had no effect: are the activations rounded at all?";
}

TEST(Matmul, Bf16ActivationRowsAreIndependentOfBatchAndThreads) {
  // Batch invariance: a row's result is bit-identical alone, in any batch, on 1, 2 or 3 threads.
  struct Shape { int n, k, m; };
  for (const Shape s : {Shape{2048, 768, 1}, Shape{768, 2048, 3}, Shape{768, 768, 13}, Shape{1000, 301, 40}}) {
    Weights w = bf16_weights(s.n, s.k, unsigned(s.n + s.k));
    std::vector<float> x = activations(s.m, s.k, unsigned(s.m));
    std::vector<float> serial(size_t(s.m) * size_t(s.n)), one(size_t(s.n));
    matmul(x.data(), size_t(s.k), w.packed, serial.data(), size_t(s.n), s.m, nullptr);
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> split(serial.size(), NAN);
      matmul(x.data(), size_t(s.k), w.packed, split.data(), size_t(s.n), s.m, &pool);
      for (size_t i = 0; i < split.size(); ++i)
        ASSERT_EQ(split[i], serial[i]) << "n=" << s.n << " k=" << s.k << " threads=" << threads << " at " << i;
    }
    for (int r = 0; r < s.m; ++r) {
      matmul(x.data() + size_t(r) * size_t(s.k), size_t(s.k), w.packed, one.data(), size_t(s.n), 1, nullptr);
      for (int o = 0; o < s.n; ++o) ASSERT_EQ(one[size_t(o)], serial[size_t(r) * size_t(s.n) + size_t(o)]) << r << "," << o;
    }
  }
}

TEST(Matmul, Bf16ActivationKernelsAreBitIdenticalAcrossIsas) {
  // The AVX-512 kernel executes vdpbf16ps; AVX2 and the plain kernel reproduce its order with
  // FMAs. On normal numbers (no subnormal weight, product or sum, which vdpbf16ps flushes) the
  // three agree bit for bit.
  const CpuFeatures& f = cpu_features();
  // 9..64 rows take the streaming walk (strips of 3 panels, every 8-row block in turn); 200
  // columns leave a strip of one panel.
  for (int m : {1, 3, 8, 11, 16, 27, 64, 65})
    for (auto nk : {std::pair{48, 64}, {40, 33}, {130, 258}, {200, 96}}) {
      const int n = nk.first, k = nk.second;
      Weights w = bf16_weights(n, k, unsigned(n * k + m));
      std::vector<float> x = activations(m, k, unsigned(m * k));
      const size_t ldxb = size_t(w.packed.k_pad / 2);
      std::vector<uint32_t> xb(size_t(m) * ldxb);
      detail::round_rows_bf16_scalar(x.data(), size_t(k), m, k, xb.data(), ldxb);
      const int panels = w.packed.n_pad / 16;
      std::vector<float> plain(size_t(m) * size_t(n));
      detail::matmul_bf16dot_panels_scalar(xb.data(), ldxb, w.packed, plain.data(), size_t(n), m, 0, panels, false);
      auto expect_same = [&](const std::vector<float>& got, const char* isa) {
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], plain[i]) << isa << " m=" << m << " n=" << n << " k=" << k << " at " << i;
      };
      if (f.avx2 && f.fma) {
        std::vector<float> y(plain.size());
        detail::matmul_bf16dot_panels_avx2(xb.data(), ldxb, w.packed, y.data(), size_t(n), m, 0, panels, false);
        expect_same(y, "avx2");
      }
      if (active_isa() == Isa::Avx512 || (f.avx512f && f.avx512bf16 && f.avx512bw && f.avx512vl)) {
        std::vector<float> y(plain.size());
        detail::matmul_bf16dot_panels_avx512(xb.data(), ldxb, w.packed, y.data(), size_t(n), m, 0, panels, false);
        expect_same(y, "avx512");
      }
    }
}

TEST(Matmul, Bf16ActivationRoundingMatchesTheInstruction) {
  // The plain rounding is the definition (nearest even; subnormals to a signed zero; NaN quiet);
  // the AVX-512 one uses vcvtne2ps2bf16, for every k modulo 32 and special values.
  std::mt19937 rng(11);
  std::vector<float> x(3 * 67);
  for (auto& v : x) {
    uint32_t u = rng();
    std::memcpy(&v, &u, 4);
  }
  const float specials[] = {0.f, -0.f, 1e-40f, -1e-40f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            1.00390625f /* a tie: 1 + 2^-8 */, 1.01171875f /* a tie that rounds up */,
                            std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 3] = specials[i];
  EXPECT_EQ(detail::round_to_bf16_exact(1.00390625f), 1.f);
  EXPECT_EQ(detail::round_to_bf16_exact(1.01171875f), 1.015625f);
  EXPECT_EQ(detail::round_to_bf16_exact(1e-40f), 0.f);
  EXPECT_TRUE(std::signbit(detail::round_to_bf16_exact(-1e-40f)));
  EXPECT_TRUE(std::isinf(detail::round_to_bf16_exact(std::numeric_limits<float>::max())));
  for (int k = 1; k <= 67; ++k) {
    const size_t ldo = size_t(k + 1) / 2 + 1;
    std::vector<uint32_t> plain(3 * ldo, 0xdeadbeefu);
    detail::round_rows_bf16_scalar(x.data(), size_t(67), 3, k, plain.data(), ldo);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(plain[size_t(r) * ldo + ldo - 1], 0xdeadbeefu) << "wrote past the row's pairs, k=" << k;
      if (k % 2) {
        EXPECT_EQ(plain[size_t(r) * ldo + size_t(k / 2)] >> 16, 0u) << "odd k pads with 0";
      }
    }
    if (active_isa() != Isa::Avx512) continue;
    std::vector<uint32_t> fast(3 * ldo, 0xdeadbeefu);
    detail::round_rows_bf16_avx512(x.data(), size_t(67), 3, k, fast.data(), ldo);
    EXPECT_EQ(fast, plain) << "k=" << k;
  }
}

// A stack whose parts share a path runs as one fork-join over all its panels; one whose parts
// differ runs part by part. Either way each column is bit for bit what its part alone gives,
// whatever the rows, threads and the panel ranges the threads get.
TEST(Matmul, StackedPartsEachGiveWhatTheyGiveAlone) {
  ThreadPool pool(2);
  const int k = 96;
  for (bool mixed : {false, true})
    for (bool bf16 : {true, false})
      for (int m : {1, 3, 5, 8, 16, 40, 70}) {
        const int ns[4] = {40, 16, 72, 12};  // parts that end mid-panel, and one of a panel
        std::vector<Weights> parts;
        std::vector<PackedWeight> packed;
        for (int i = 0; i < 4; ++i) {
          parts.push_back(bf16_weights(ns[i], k, unsigned(100 * i + m)));
          packed.push_back(parts.back().packed);
          // mixed: the second part meets f32 activations, so the stack runs part by part
          if (!bf16 || (mixed && i == 1)) set_activation_dtype(packed.back(), ActivationDtype::F32);
        }
        const PackedWeight stack = stack_weights(packed);
        std::vector<float> x = activations(m, k, unsigned(m + 3));
        const size_t ldy = 140 + 3;
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> y(size_t(m) * ldy, 0.5f), want(size_t(m) * ldy, 0.5f);
          matmul(x.data(), size_t(k), stack, y.data(), ldy, m, p);
          size_t col = 0;
          for (int i = 0; i < 4; ++i) {
            matmul(x.data(), size_t(k), packed[size_t(i)], want.data() + col, ldy, m, nullptr);
            col += size_t(ns[i]);
          }
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_EQ(y[i], want[i]) << "mixed=" << mixed << " bf16=" << bf16 << " m=" << m << " threads=" << (p ? 2 : 1) << " at " << i;
        }
      }
}

TEST(Matmul, ActivationDtypeReachesStackPartsAndSparesOtherWeights) {
  Weights a = bf16_weights(32, 64, 1), b = bf16_weights(16, 64, 2);
  std::vector<float> f32(size_t(16) * 64, 0.5f);
  PackedWeight stack = stack_weights({pack_weight(a.bits.data(), DType::BF16, 32, 64), pack_weight(f32.data(), DType::F32, 16, 64)});
  set_activation_dtype(stack, ActivationDtype::BF16);
  ASSERT_EQ(stack.parts.size(), 2u);
  EXPECT_EQ(stack.parts[0].activations, ActivationDtype::BF16);
  EXPECT_EQ(stack.parts[1].activations, ActivationDtype::F32) << "f32 weights keep f32 activations";
  set_activation_dtype(stack, ActivationDtype::F32);
  EXPECT_EQ(stack.parts[0].activations, ActivationDtype::F32);
  EXPECT_EQ(parse_activation_dtype("bfloat16"), ActivationDtype::BF16);
  EXPECT_EQ(parse_activation_dtype("fp8"), std::nullopt);
  EXPECT_EQ(activation_dtype_name(ActivationDtype::BF16), "bf16");
}

}  // namespace
}  // namespace ds
