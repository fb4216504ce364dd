// Quantized weight formats: their error bounds, the activations' int8 blocks, and every kernel
// against the plain reference on the dequantized weights and activations (both exact: see
// kernels/quant_formats.h and kernels/quant_activations.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/quant_activations.h"
#include "kernels/quant_formats.h"

namespace ds {
namespace {

const QuantFormat kFormats[] = {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::MXFP4};

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Quantized {
  std::vector<uint8_t> codes, scales;
};

Quantized quantize(QuantFormat f, const std::vector<float>& w, int n, int k) {
  Quantized q;
  q.codes.resize(size_t(n) * quant_code_bytes(f, k));
  q.scales.resize(size_t(n) * quant_scale_bytes(f, k));
  for (int r = 0; r < n; ++r)
    quantize_row(f, w.data() + size_t(r) * size_t(k), k, q.codes.data() + size_t(r) * quant_code_bytes(f, k),
                 q.scales.data() + size_t(r) * quant_scale_bytes(f, k));
  return q;
}

std::vector<float> dequantize(QuantFormat f, const Quantized& q, int n, int k) {
  std::vector<float> out(size_t(n) * size_t(k));
  for (int r = 0; r < n; ++r)
    dequantize_row(f, q.codes.data() + size_t(r) * quant_code_bytes(f, k),
                   q.scales.data() + size_t(r) * quant_scale_bytes(f, k), k, out.data() + size_t(r) * size_t(k));
  return out;
}

// The largest error quantizing one value may make, in units of its block's scale: half a step
// for Q8_0; a step for Q4_0 (the side opposite the largest value may clamp at +7); for MXFP4
// half of E2M1's widest gap (2) and saturation above 6 (at most 8 - 6).
float bound_in_scales(QuantFormat f) { return f == QuantFormat::Q8_0 ? 0.5f : f == QuantFormat::Q4_0 ? 1.f : 2.f; }

TEST(QuantFormats, RoundTripErrorIsWithinEachFormatsBound) {
  const int k = 256;
  for (QuantFormat f : kFormats) {
    for (float scale : {1e-3f, 1.f, 40.f}) {
      const std::vector<float> x = random_values(size_t(k), 7, scale);
      Quantized q = quantize(f, x, 1, k);
      const std::vector<float> y = dequantize(f, q, 1, k);
      double err2 = 0, x2 = 0;
      for (int i = 0; i < k; ++i) {
        const float d = std::fabs(quant_block_scale(f, q.scales.data(), i / kQuantBlock));
        EXPECT_LE(std::fabs(x[size_t(i)] - y[size_t(i)]), bound_in_scales(f) * d * 1.001f + 1e-30f)
            << quant_format_name(f) << " scale " << scale << " i " << i << ": " << x[size_t(i)] << " -> " << y[size_t(i)];
        err2 += double(x[size_t(i)] - y[size_t(i)]) * (x[size_t(i)] - y[size_t(i)]);
        x2 += double(x[size_t(i)]) * x[size_t(i)];
      }
      // Relative RMS error of Gaussian weights: Q8_0 under 1%, the 4-bit formats under 15%.
      EXPECT_LT(std::sqrt(err2 / x2), f == QuantFormat::Q8_0 ? 0.01 : 0.15) << quant_format_name(f);
    }
  }
}

TEST(QuantFormats, ZerosAndRepresentableValuesRoundTripExactly) {
  for (QuantFormat f : kFormats) {
    std::vector<float> zeros(64, 0.f);
    EXPECT_EQ(dequantize(f, quantize(f, zeros, 1, 64), 1, 64), zeros) << quant_format_name(f);
  }
  // Codes that are the format's own values come back as they were.
  std::vector<float> e2m1(32);
  const float vals[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 32; ++i) e2m1[size_t(i)] = (i % 2 ? -1.f : 1.f) * vals[i % 8];
  EXPECT_EQ(dequantize(QuantFormat::MXFP4, quantize(QuantFormat::MXFP4, e2m1, 1, 32), 1, 32), e2m1);
  std::vector<float> ints(32);
  for (int i = 0; i < 32; ++i) ints[size_t(i)] = float(i * 8 - 127 > 127 ? 127 : i * 8 - 127);
  EXPECT_EQ(dequantize(QuantFormat::Q8_0, quantize(QuantFormat::Q8_0, ints, 1, 32), 1, 32), ints);
}

TEST(QuantFormats, NamesAndDtypesNameEachOther) {
  for (QuantFormat f : kFormats) {
    QuantFormat g;
    ASSERT_TRUE(parse_quant_format(quant_format_name(f), &g));
    EXPECT_EQ(g, f);
    EXPECT_EQ(quant_format_of(quant_code_dtype(f), quant_scale_dtype(f)), f);
  }
  QuantFormat g;
  EXPECT_FALSE(parse_quant_format("q5_k", &g));
  EXPECT_EQ(quant_format_of(DType::BF16, DType::F16), QuantFormat::None);
}

// The activations as the kernels see them: each row quantized by the definition, then
// dequantized (q * d), so a plain double matmul on them is the kernels' exact reference.
std::vector<float> quantized_activations_as_floats(const std::vector<float>& x, int m, int k) {
  std::vector<float> out(x.size());
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> d(static_cast<size_t>(k / 32));
  std::vector<int32_t> sum(static_cast<size_t>(k / 32));
  for (int r = 0; r < m; ++r) {
    quantize_activation_row(x.data() + size_t(r) * size_t(k), k, q.data(), d.data(), sum.data());
    for (int c = 0; c < k; ++c) out[size_t(r) * size_t(k) + size_t(c)] = float(q[size_t(c)]) * d[size_t(c / 32)];
  }
  return out;
}

// Every row count 1..64 reaches every microkernel shape (1-8 rows, and the row blocks past 8);
// odd n covers the masked last panel, several k the block loop. The AVX-512 (VNNI), AVX2 and
// scalar kernels compute the same integers and the same float operations in the same order:
// their results are equal bit for bit, and within float rounding of the double reference.
TEST(QuantMatmul, KernelsMatchTheReferenceOnQuantizedActivations) {
  for (QuantFormat f : kFormats) {
    for (auto [n, k] : {std::pair{1, 32}, std::pair{17, 64}, std::pair{50, 96}, std::pair{130, 320}}) {
      const std::vector<float> w = random_values(size_t(n) * size_t(k), uint32_t(n * 31 + k));
      const Quantized q = quantize(f, w, n, k);
      const std::vector<float> wd = dequantize(f, q, n, k);
      const PackedWeight p = pack_quantized_weight(f, q.codes.data(), q.scales.data(), n, k);
      EXPECT_EQ(p.bytes(), size_t((n + 15) / 16) * size_t(k / 32) * quant_panel_block_bytes(f));
      for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 64}) {
        const std::vector<float> x = random_values(size_t(m) * size_t(k), uint32_t(m));
        const std::vector<float> xq = quantized_activations_as_floats(x, m, k);
        std::vector<std::byte> scratch(quantized_activation_bytes(m, k));
        const QuantizedActivations xa = quantized_activations_view(scratch.data(), m, k);
        quantize_activation_rows(x.data(), size_t(k), 0, m, xa);
        std::vector<float> ref(size_t(m) * size_t(n)), y(size_t(m) * size_t(n), 5.f), ys(y), y2(y);
        matmul_reference(xq.data(), size_t(k), wd.data(), DType::F32, n, k, ref.data(), size_t(n), m);
        matmul(x.data(), size_t(k), p, y.data(), size_t(n), m, nullptr, false);
        detail::matmul_quant_panels_scalar(xa, p, ys.data(), size_t(n), m, 0, p.n_pad / 16, false);
        if (cpu_features().avx2 && cpu_features().fma) {
          detail::matmul_quant_panels_avx2(xa, p, y2.data(), size_t(n), m, 0, p.n_pad / 16, false);
        }
        for (int r = 0; r < m; ++r)
          for (int o = 0; o < n; ++o) {
            double mag = 0;
            for (int c = 0; c < k; ++c) mag += std::fabs(double(xq[size_t(r) * size_t(k) + size_t(c)]) * wd[size_t(o) * size_t(k) + size_t(c)]);
            const size_t i = size_t(r) * size_t(n) + size_t(o);
            ASSERT_NEAR(y[i], ref[i], 1e-5 * mag + 1e-6)
                << quant_format_name(f) << " n " << n << " k " << k << " m " << m << " row " << r << " col " << o;
            ASSERT_EQ(ys[i], y[i]) << "scalar " << quant_format_name(f) << " n " << n << " k " << k << " m " << m;
            if (cpu_features().avx2 && cpu_features().fma) {
              ASSERT_EQ(y2[i], y[i]) << "avx2 " << quant_format_name(f);
            }
          }
      }
    }
  }
}

// What quantizing the activations costs: against the f32 activations, each block moves a
// result by at most d_x / 2 * sum |w| over the block (half a step of each activation).
TEST(QuantMatmul, ActivationQuantizingStaysWithinItsBound) {
  const int n = 40, k = 256, m = 5;
  for (QuantFormat f : kFormats) {
    const std::vector<float> w = random_values(size_t(n) * size_t(k), 21);
    const Quantized q = quantize(f, w, n, k);
    const std::vector<float> wd = dequantize(f, q, n, k);
    const PackedWeight p = pack_quantized_weight(f, q.codes.data(), q.scales.data(), n, k);
    const std::vector<float> x = random_values(size_t(m) * size_t(k), 22, 3.f);
    std::vector<float> exact(size_t(m) * size_t(n)), y(size_t(m) * size_t(n));
    matmul_reference(x.data(), size_t(k), wd.data(), DType::F32, n, k, exact.data(), size_t(n), m);
    matmul(x.data(), size_t(k), p, y.data(), size_t(n), m, nullptr, false);
    for (int r = 0; r < m; ++r)
      for (int o = 0; o < n; ++o) {
        double bound = 1e-5;
        for (int b = 0; b < k / 32; ++b) {
          float amax = 0, wsum = 0;
          for (int i = 0; i < 32; ++i) {
            amax = std::max(amax, std::fabs(x[size_t(r) * size_t(k) + size_t(b * 32 + i)]));
            wsum += std::fabs(wd[size_t(o) * size_t(k) + size_t(b * 32 + i)]);
          }
          bound += amax / 127.0 / 2 * wsum * 1.001;
        }
        EXPECT_LE(std::fabs(y[size_t(r) * size_t(n) + size_t(o)] - exact[size_t(r) * size_t(n) + size_t(o)]), bound)
            << quant_format_name(f) << " row " << r << " col " << o;
      }
  }
}

TEST(QuantActivations, TheDefinitionRoundsToNearestEvenAndTheFastFormAgrees) {
  // Block 0: the max maps to 127 exactly and halves round to even; block 1 all zeros.
  std::vector<float> x(64, 0.f);
  x[0] = 127.f;
  x[1] = 2.5f;   // 2.5 * 127 / 127 -> 2 (even)
  x[2] = -3.5f;  // -> -4
  x[3] = 0.49f;
  std::vector<int8_t> q(64);
  float d[2];
  int32_t sum[2];
  quantize_activation_row(x.data(), 64, q.data(), d, sum);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], -4);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(d[0], 1.f);
  EXPECT_EQ(sum[0], 127 + 2 - 4);
  EXPECT_EQ(d[1], 0.f);
  EXPECT_EQ(sum[1], 0);
  if (active_isa() != Isa::Avx512) GTEST_SKIP() << "no AVX-512 here: the definition is what runs";
  for (float scale : {1e-6f, 0.3f, 1.f, 1e4f}) {
    const std::vector<float> v = random_values(320, 9, scale);
    std::vector<int8_t> qa(320), qb(320);
    float da[10], db[10];
    int32_t sa[10], sb[10];
    quantize_activation_row(v.data(), 320, qa.data(), da, sa);
    detail::quantize_activation_row_avx512(v.data(), 320, qb.data(), db, sb);
    EXPECT_EQ(qa, qb) << scale;
    for (int b = 0; b < 10; ++b) {
      EXPECT_EQ(da[b], db[b]);
      EXPECT_EQ(sa[b], sb[b]);
    }
  }
}

TEST(QuantMatmul, AccumulateAddsToWhatIsThere) {
  const int n = 33, k = 64, m = 3;
  for (QuantFormat f : kFormats) {
    const std::vector<float> w = random_values(size_t(n) * size_t(k), 3);
    const Quantized q = quantize(f, w, n, k);
    const PackedWeight p = pack_quantized_weight(f, q.codes.data(), q.scales.data(), n, k);
    const std::vector<float> x = random_values(size_t(m) * size_t(k), 4);
    std::vector<float> once(size_t(m) * size_t(n)), twice(size_t(m) * size_t(n));
    matmul(x.data(), size_t(k), p, once.data(), size_t(n), m, nullptr, false);
    matmul(x.data(), size_t(k), p, twice.data(), size_t(n), m, nullptr, false);
    matmul(x.data(), size_t(k), p, twice.data(), size_t(n), m, nullptr, true);
    for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  }
}

TEST(QuantMatmul, PackingRefusesKNotAMultipleOf32) {
  std::vector<uint8_t> codes(40), scales(4);
  EXPECT_THROW(pack_quantized_weight(QuantFormat::Q8_0, codes.data(), scales.data(), 1, 40), Error);
}

}  // namespace
}  // namespace ds
