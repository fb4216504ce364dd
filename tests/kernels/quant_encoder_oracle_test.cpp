// Brute-force oracles for the weight encoders (quantize_row, kernels/quant_formats.cpp): given
// the scale a block was given, every code must be the nearest of those the format has (searched
// over all of them, distances in long double), with the tie rule each format states:
//   Q4_0   x / d is rounded half to even, so at an exact midpoint the code q with q - 8 even
//          (q even) wins; a zero scale (a block too small for f16) writes code 8 (value 0).
//   Q8_0   likewise half to even over [-127, 127]; a zero scale writes 0.
//   MXFP4  E2M1 ties go to the even mantissa (the code with bit 0 clear), as OCP's
//          round-to-nearest-even conversion does, and a value that rounds to zero is code 0
//          (+0), never code 8 (-0).
// And the scale itself: Q4_0's d is the finite f16 nearest to m / -8 (m the block's value of
// largest magnitude; a block past f16's range saturates at 65504 rather than an infinite scale,
// which decoded the whole block to NaN), Q8_0's the one nearest to amax / 127; MXFP4's E8M0
// exponent is floor(log2(amax)) - 2, clamped to [-127, 127].
// The sweeps cover every sign, every exact midpoint, the f16 subnormal scales, the whole E8M0
// range the encoder can reach (byte 0 to 252: amax from 2^-149 to FLT_MAX) and subnormal inputs.
//
// The encoders have one implementation (scalar C++, no ISA variants). What dispatches on the
// ISA is what reads their codes (the quantized matmul kernels) and the activations' int8
// quantizer: the last two tests hold the scalar, AVX2 and AVX-512 forms of those bit-identical
// on the very blocks the oracles produced, and on every exact activation midpoint.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/quant_activations.h"
#include "kernels/quant_formats.h"

namespace ds {
namespace {

// The format's values before the scale, written from the definitions (not the product's
// tables): Q4_0 q - 8; OCP E2M1 sign | 2 exponent bits | 1 mantissa bit.
double q4_value(int q) { return q - 8; }
double e2m1_value(int c) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8 ? -1 : 1) * mag[c & 7];
}

// IEEE binary16 to double, by the definition (independent of core/dtype's converter).
double f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(double(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(double(m | 0x400), e - 25);
  return s ? -v : v;
}
uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
int nibble(const uint8_t* codes, int i) { return i % 2 == 0 ? codes[i / 2] & 0x0f : codes[i / 2] >> 4; }

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Block {
  std::vector<float> x;  // 32 values
  std::string what;
};

// Encodes one block and checks the scale and every code against the brute force. Returns the
// number of failures (each reported once with the block's name).
int check_block(QuantFormat f, const Block& b, std::vector<uint8_t>* codes_out = nullptr, std::vector<uint8_t>* scale_out = nullptr) {
  const size_t code_bytes = quant_code_bytes(f, 32), scale_bytes = quant_scale_bytes(f, 32);
  std::vector<uint8_t> codes(code_bytes, 0xee), scale(2, 0xee);
  quantize_row(f, b.x.data(), 32, codes.data(), scale.data());
  if (codes_out) codes_out->insert(codes_out->end(), codes.begin(), codes.end());
  if (scale_out) scale_out->insert(scale_out->end(), scale.begin(), scale.begin() + long(scale_bytes));
  int fails = 0;
  auto fail = [&](const std::string& msg) {
    if (++fails <= 3) ADD_FAILURE() << quant_format_name(f) << " " << b.what << ": " << msg;
  };
  // The candidates: code -> value before the scale.
  std::vector<std::pair<int, double>> cands;
  if (f == QuantFormat::Q8_0)
    for (int q = -127; q <= 127; ++q) cands.push_back({q, q});
  else
    for (int q = 0; q < 16; ++q) cands.push_back({q, f == QuantFormat::Q4_0 ? q4_value(q) : e2m1_value(q)});
  const auto code_of = [&](int i) {
    return f == QuantFormat::Q8_0 ? int(int8_t(codes[size_t(i)])) : nibble(codes.data(), i);
  };
  long double s;
  if (f != QuantFormat::MXFP4) {
    // Q4_0: m, the first value of largest magnitude, over -8; Q8_0: amax over 127. The stored
    // bits must be the finite f16 nearest to that (neither finite neighbour is nearer).
    float m = 0;
    for (float v : b.x)
      if (std::fabs(v) > std::fabs(m)) m = v;
    const uint16_t bits = load_u16(scale.data());
    const long double target = f == QuantFormat::Q4_0 ? (long double)m / -8.0L : std::fabs((long double)m) / 127.0L;
    const long double d = f16_value(bits);
    if (!std::isfinite(double(d))) {
      fail("scale bits " + std::to_string(bits) + " are not finite (m = " + g(m) + ")");
      return fails;
    }
    for (int step : {-1, 1}) {
      const uint16_t nb = uint16_t(bits + step);
      if (((nb ^ bits) & 0x8000) || ((nb >> 10) & 0x1f) == 31) continue;  // crossed the sign or into inf/NaN
      if (std::fabs((long double)f16_value(nb) - target) < std::fabs(d - target))
        fail("scale bits " + std::to_string(bits) + " are not the f16 nearest to " + g(double(target)));
    }
    s = d;
  } else {
    float amax = 0;
    for (float v : b.x) amax = std::max(amax, std::fabs(v));
    const int e = int(scale[0]) - 127;
    if (amax > 0) {
      int ex;
      std::frexp(amax, &ex);  // amax = f * 2^ex, f in [0.5, 1): floor(log2(amax)) = ex - 1
      const int want = std::clamp(ex - 1 - 2, -127, 127);
      if (e != want) fail("E8M0 byte " + std::to_string(scale[0]) + ", want " + std::to_string(want + 127));
    }
    s = std::ldexp(1.0L, e);
  }
  for (int i = 0; i < 32; ++i) {
    const int c = code_of(i);
    const long double x = b.x[size_t(i)];
    const auto dist = [&](double v) { return std::fabs(x - s * (long double)v); };
    long double best = INFINITY, mine = INFINITY;
    int tied = 0;
    for (const auto& [q, v] : cands) best = std::min(best, dist(v));
    for (const auto& [q, v] : cands) {
      tied += dist(v) == best;
      if (q == c) mine = dist(v);
    }
    const std::string at = "element " + std::to_string(i) + " x=" + g(double(x)) + " (" + g(double(x / s)) + " scales) got code " + std::to_string(c);
    // Past the format's largest value the nearest is its end (the distances there can exceed
    // long double's precision, so this is decided by the quotient, not by them).
    double lo = INFINITY, hi = -INFINITY;
    int lo_code = 0, hi_code = 0;
    for (const auto& [q, v] : cands) {
      if (v < lo || (v == lo && q == 0)) lo = v, lo_code = q;
      if (v > hi) hi = v, hi_code = q;
    }
    if (s != 0 && (x / s >= hi || x / s <= lo)) {
      const int want = x / s >= hi ? hi_code : lo_code;
      if (c != want) fail(at + ": a value at or past the format's end must take code " + std::to_string(want));
      continue;
    }
    if (mine != best) {
      fail(at + ", which is not the nearest");
      continue;
    }
    if (f != QuantFormat::MXFP4) {
      const int zero = f == QuantFormat::Q4_0 ? 8 : 0;
      if (s == 0) {
        if (c != zero) fail(at + ": a zero scale must write code " + std::to_string(zero));
      } else if (tied > 1 && c % 2 != 0) {
        fail(at + ": a midpoint must round to the even code");
      }
    } else {
      if (c == 8) fail(at + ": zero must be written as code 0 (+0), not 8 (-0)");
      else if (tied > 1 && (c & 1) != 0) fail(at + ": a midpoint must round to the even mantissa");
    }
  }
  return fails;
}

// Q4_0: with m = -8 * d0 the stored scale is d0 exactly, and d0 * (n + 1/2) is exact in f32
// (11 + 5 bits), so these are true midpoints; their float neighbours are the nearest
// non-midpoints, which a quotient rounded in f32 could send to the wrong side.
std::vector<Block> q4_blocks() {
  std::vector<Block> out;
  // d0 = +-2^k over f16's whole exponent range, subnormals (2^-24 .. 2^-15) included.
  for (int k = -24; k <= 15; ++k)
    for (float sign : {1.f, -1.f}) {
      const float d0 = sign * std::ldexp(1.f, k);
      Block b{{}, "d0=" + g(d0) + " half steps"};
      b.x.push_back(-8 * d0);
      for (int i = 1; i < 32; ++i) b.x.push_back(d0 * (-7.5f + 0.5f * float(i - 1)));  // -7.5 .. 7.5 by halves
      out.push_back(b);
    }
  // Random f16 scales (all 11 mantissa bits) with midpoints and their float neighbours.
  std::mt19937 rng(43);
  for (int t = 0; t < 400; ++t) {
    const uint16_t h = uint16_t(((rng() % 29) + 1) << 10 | (rng() & 0x3ff) | (rng() & 1) << 15);
    const float d0 = float(f16_value(h));
    Block b{{}, "random f16 d0=" + g(d0)};
    b.x.push_back(-8 * d0);
    while (b.x.size() < 32) {
      const float mid = d0 * (float(int(rng() % 15) - 8) + 0.5f);  // -7.5 .. 6.5
      const int how = int(rng() % 3);
      b.x.push_back(how == 0 ? mid : std::nextafter(mid, how == 1 ? INFINITY : -INFINITY));
    }
    out.push_back(b);
  }
  // Gaussian blocks over many magnitudes, and blocks whose m / -8 is below f16's smallest
  // subnormal (the scale rounds to zero) or at its edge.
  for (float scale : {1e-8f, 1e-6f, 1e-3f, 0.1f, 1.f, 30.f, 1e4f}) {
    std::normal_distribution<float> nd(0.f, scale);
    for (int t = 0; t < 40; ++t) {
      Block b{{}, "gaussian sigma " + g(scale)};
      for (int i = 0; i < 32; ++i) b.x.push_back(nd(rng));
      out.push_back(b);
    }
  }
  // Past f16's range (m / -8 > 65504) and at it: the scale saturates.
  for (float m : {std::ldexp(1.f, -30), std::ldexp(1.f, -27), std::ldexp(3.f, -28), 1e-45f, -1e-45f, 0.f, 524000.f, 6e5f,
                  -1e7f, 1e20f, FLT_MAX, -FLT_MAX}) {
    Block b{{}, "extreme m=" + g(m)};
    for (int i = 0; i < 32; ++i) b.x.push_back(m / 4 * float(i % 5));
    b.x[0] = m;
    out.push_back(b);
  }
  return out;
}

// MXFP4: with a block maximum of 6 * 2^E the exponent is E (clamped), and every E2M1 value,
// midpoint and value past 6 scaled by 2^E is exact in f32 while E >= -147. E runs from -147
// (byte 0, inputs subnormal) to 125 (byte 252: the largest the encoder can reach, since
// FLT_MAX < 2^128).
std::vector<Block> mxfp4_blocks() {
  static const float grid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  static const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5};
  std::vector<Block> out;
  for (int E = -147; E <= 125; ++E) {
    for (float sign : {1.f, -1.f}) {
      Block b{{}, "E=" + std::to_string(E) + (sign > 0 ? " +" : " -")};
      b.x.push_back(sign * std::ldexp(6.f, E));
      for (float g : grid) b.x.push_back(-sign * std::ldexp(g, E));
      for (float m : mids) b.x.push_back(sign * std::ldexp(m, E)), b.x.push_back(-sign * std::ldexp(m, E));
      for (float big : {6.5f, 7.f, 7.75f}) b.x.push_back(sign * std::ldexp(big, E));  // saturate to 6
      while (b.x.size() < 32) b.x.push_back(sign * std::ldexp(0.125f, E));             // below the first midpoint
      out.push_back(b);
    }
  }
  std::mt19937 rng(44);
  for (float scale : {1e-40f, 1e-30f, 1e-6f, 1.f, 1e5f, 1e30f}) {
    std::normal_distribution<float> nd(0.f, scale);
    for (int t = 0; t < 40; ++t) {
      Block b{{}, "gaussian sigma " + g(scale)};
      for (int i = 0; i < 32; ++i) b.x.push_back(nd(rng));
      out.push_back(b);
    }
  }
  for (float m : {FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, 0.f, -0.f}) {
    Block b{{}, "extreme m=" + g(m)};
    for (int i = 0; i < 32; ++i) b.x.push_back(m / 4 * float((i % 9) - 4));  // no overflow at FLT_MAX
    b.x[0] = m;
    out.push_back(b);
  }
  return out;
}

TEST(QuantEncoderOracle, Q4_0CodesAreTheNearestGivenTheScaleWithTiesToEven) {
  int fails = 0;
  for (const Block& b : q4_blocks()) fails += check_block(QuantFormat::Q4_0, b);
  EXPECT_EQ(fails, 0);
}

// Q8_0 on the same blocks (its own ties land elsewhere; the sweep of d0 * (n + 1/2) below adds them).
TEST(QuantEncoderOracle, Q8_0CodesAreTheNearestGivenTheScaleWithTiesToEven) {
  std::vector<Block> blocks = q4_blocks();
  for (int k = -24; k <= 15; ++k) {
    const float d0 = std::ldexp(1.f, k);  // amax = 127 * d0: the scale is d0 exactly
    Block b{{}, "d0=" + g(d0) + " half steps"};
    b.x.push_back(-127 * d0);
    for (int i = 1; i < 32; ++i) b.x.push_back(d0 * (float(i * 8 - 127) + 0.5f));
    blocks.push_back(b);
  }
  int fails = 0;
  for (const Block& b : blocks) fails += check_block(QuantFormat::Q8_0, b);
  EXPECT_EQ(fails, 0);
}

TEST(QuantEncoderOracle, Mxfp4CodesAreTheNearestGivenTheScaleWithTiesToEvenMantissa) {
  int fails = 0;
  for (const Block& b : mxfp4_blocks()) fails += check_block(QuantFormat::MXFP4, b);
  EXPECT_EQ(fails, 0);
}

bool have_avx2() { return cpu_features().avx2 && cpu_features().fma && cpu_features().f16c; }
bool have_avx512() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512bf16 && f.avx512vnni && f.fma;
}

// The oracle's blocks as rows of one weight, read by each ISA's kernel: equal bit for bit
// (memcmp, so signed zeros, infinities and subnormal results count). The MXFP4 blocks below
// 2^-124 carry E8M0 byte 0, which is 2^-127 (a subnormal) in every form; the SIMD kernels once
// read it as 0 while the scalar one and dequantize_row (and ggml) did not.
TEST(QuantEncoderOracle, EveryIsaReadsTheOracleBlocksBitIdentically) {
  for (QuantFormat f : {QuantFormat::Q4_0, QuantFormat::MXFP4}) {
    std::vector<uint8_t> codes, scales;
    const std::vector<Block> blocks = f == QuantFormat::Q4_0 ? q4_blocks() : mxfp4_blocks();
    for (const Block& b : blocks) check_block(f, b, &codes, &scales);
    const int n = int(blocks.size()), k = 32;
    const PackedWeight p = pack_quantized_weight(f, codes.data(), scales.data(), n, k);
    // Activations: a one-hot row per position class and a few dense ones, of ordinary size.
    const int m = 6;
    std::vector<float> x(size_t(m) * k, 0.f);
    std::mt19937 rng(45);
    std::normal_distribution<float> nd(0.f, 1.f);
    x[0] = 1.f;
    x[size_t(k) + 17] = -3.f;
    for (size_t i = 2 * size_t(k); i < x.size(); ++i) x[i] = nd(rng);
    std::vector<std::byte> scratch(quantized_activation_bytes(m, k));
    const QuantizedActivations xa = quantized_activations_view(scratch.data(), m, k);
    quantize_activation_rows(x.data(), size_t(k), 0, m, xa);
    std::vector<float> ys(size_t(m) * size_t(n)), y2(ys.size()), y5(ys.size());
    detail::matmul_quant_panels_scalar(xa, p, ys.data(), size_t(n), m, 0, p.n_pad / 16, false);
    if (have_avx2()) detail::matmul_quant_panels_avx2(xa, p, y2.data(), size_t(n), m, 0, p.n_pad / 16, false);
    if (have_avx512()) detail::matmul_quant_panels_avx512(xa, p, y5.data(), size_t(n), m, 0, p.n_pad / 16, false);
    int diffs = 0;
    for (int r = 0; r < m; ++r)
      for (int o = 0; o < n; ++o) {
        const size_t i = size_t(r) * size_t(n) + size_t(o);
        for (auto [name, y, on] : {std::tuple{"avx2", &y2, have_avx2()}, std::tuple{"avx512", &y5, have_avx512()}}) {
          if (on && std::memcmp(&(*y)[i], &ys[i], 4) != 0 && ++diffs <= 5)
            ADD_FAILURE() << quant_format_name(f) << " " << name << " row " << r << " block '" << blocks[size_t(o)].what
                          << "': " << (*y)[i] << " vs scalar " << ys[i];
        }
      }
    EXPECT_EQ(diffs, 0) << quant_format_name(f);
  }
}

// The activations' int8 quantizer at every exact midpoint: with amax = 127 * 2^j the
// multiplier 127 / amax is 2^-j exactly, so (k + 1/2) * 2^j lands on k + 1/2 and must round to
// the even integer (nearbyint in the default mode), in the definition and in the AVX-512 form.
TEST(QuantEncoderOracle, ActivationMidpointsRoundToEvenInEveryForm) {
  for (int j : {-100, -20, -1, 0, 1, 7, 20, 100}) {
    // Blocks of 32: the block's amax (+-127 * 2^j) first, then 31 of the 254 midpoints.
    std::vector<float> mids;
    for (int kk = -127; kk < 127; ++kk) mids.push_back(std::ldexp(float(kk) + 0.5f, j));
    std::vector<float> x;
    for (size_t next = 0; next < mids.size();) {
      x.push_back(std::ldexp(x.size() % 64 ? -127.f : 127.f, j));
      for (int i = 1; i < 32; ++i) x.push_back(next < mids.size() ? mids[next++] : 0.f);
    }
    const int k = int(x.size());
    std::vector<int8_t> q(static_cast<size_t>(k)), q5(static_cast<size_t>(k));
    std::vector<float> d(size_t(k / 32)), d5(d.size());
    std::vector<int32_t> s(d.size()), s5(d.size());
    quantize_activation_row(x.data(), k, q.data(), d.data(), s.data());
    for (int i = 0; i < k; ++i) {
      const double t = std::ldexp(double(x[size_t(i)]), -j);  // exact
      double want = std::nearbyint(t);
      if (std::fabs(t - std::trunc(t)) == 0.5) want = 2 * std::round(t / 2);  // half to even, stated independently
      ASSERT_EQ(q[size_t(i)], int8_t(want)) << "j " << j << " element " << i << " = " << t << " * 2^j";
    }
    if (!have_avx512()) continue;
    detail::quantize_activation_row_avx512(x.data(), k, q5.data(), d5.data(), s5.data());
    EXPECT_EQ(q5, q) << "j " << j;
    EXPECT_EQ(d5, d) << "j " << j;
    EXPECT_EQ(s5, s) << "j " << j;
  }
}

}  // namespace
}  // namespace ds
