// KV cache rows in each dtype: the E4M3 codec against brute force over its 256 codes, and the
// error bounds of stored rows.
#include "kernels/kv_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ds {
namespace {

bool is_nan_code(int c) { return (c & 0x7f) == 0x7f; }

TEST(Fp8E4M3, CodesDecodeToTheirOcpValues) {
  EXPECT_EQ(fp8_e4m3_decode(0x00), 0.f);
  EXPECT_EQ(fp8_e4m3_decode(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_decode(0x07), 7.f * std::ldexp(1.f, -9));
  EXPECT_EQ(fp8_e4m3_decode(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_decode(0x38), 1.f);
  EXPECT_EQ(fp8_e4m3_decode(0x7e), 448.f);  // largest finite
  EXPECT_EQ(fp8_e4m3_decode(0xb8), -1.f);
  EXPECT_EQ(fp8_e4m3_decode(0xfe), -448.f);
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    EXPECT_EQ(fp8_e4m3_encode(fp8_e4m3_decode(uint8_t(c))), c == 0x80 ? 0x80 : c) << "code " << c;
  }
}

// The nearest finite code by brute force, ties to the even code (mantissa's last bit 0).
uint8_t nearest_code(float x) {
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c) || (c & 0x80) != (std::signbit(x) ? 0x80 : 0)) continue;
    const double err = std::fabs(double(fp8_e4m3_decode(uint8_t(c))) - double(x));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return uint8_t(best);
}

TEST(Fp8E4M3, EncodeIsRoundToNearestEvenAndSaturates) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> e(-12.f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float mag = std::exp2(e(rng));
    const float x = (i & 1) ? -mag : mag;
    if (std::fabs(x) > 448.f) continue;
    ASSERT_EQ(fp8_e4m3_encode(x), nearest_code(x)) << "x = " << x;
  }
  // Exact midpoints between neighbours go to the even one.
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = 0.5f * (fp8_e4m3_decode(uint8_t(c)) + fp8_e4m3_decode(uint8_t(c + 1)));
    EXPECT_EQ(fp8_e4m3_encode(mid), (c & 1) ? c + 1 : c) << "midpoint after code " << c;
  }
  EXPECT_EQ(fp8_e4m3_encode(449.f), 0x7e);
  EXPECT_EQ(fp8_e4m3_encode(1e30f), 0x7e);
  EXPECT_EQ(fp8_e4m3_encode(-INFINITY), 0xfe);
  EXPECT_EQ(fp8_e4m3_encode(NAN), 0x00);
}

TEST(KvRows, StoredRowsAreWithinEachDtypesBound) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  for (int n : {1, 16, 64, 576}) {
    std::vector<float> x(static_cast<size_t>(n)), back(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng) * 3.f;
    x[size_t(n) / 2] = 40.f;  // an outlier sets the fp8 row's scale
    float amax = 0.f;
    for (float v : x) amax = std::fmax(amax, std::fabs(v));
    std::vector<std::byte> row(size_t(n) * 4);
    float scale = -1.f;

    kv_store_row(KvDtype::F32, x.data(), n, row.data(), nullptr);
    kv_load_row(KvDtype::F32, row.data(), 1.f, n, back.data());
    EXPECT_EQ(back, x);

    kv_store_row(KvDtype::BF16, x.data(), n, row.data(), nullptr);
    kv_load_row(KvDtype::BF16, row.data(), 1.f, n, back.data());
    for (int i = 0; i < n; ++i) ASSERT_LE(std::fabs(back[size_t(i)] - x[size_t(i)]), std::ldexp(std::fabs(x[size_t(i)]), -8));  // 8 significant bits

    kv_store_row(KvDtype::Fp8E4M3, x.data(), n, row.data(), &scale);
    EXPECT_FLOAT_EQ(scale, amax / 448.f);
    kv_load_row(KvDtype::Fp8E4M3, row.data(), scale, n, back.data());
    // Normal codes: half a step of 3 mantissa bits (2^-4 relative); subnormals: half of 2^-9.
    for (int i = 0; i < n; ++i) {
      const float bound = std::fmax(std::ldexp(std::fabs(x[size_t(i)]), -4), std::ldexp(scale, -10)) * 1.0001f;
      ASSERT_LE(std::fabs(back[size_t(i)] - x[size_t(i)]), bound) << "n=" << n << " i=" << i;
    }
    EXPECT_FLOAT_EQ(back[size_t(n) / 2], 40.f);  // the row's max maps to 448 exactly
  }
  std::vector<float> zeros(32, 0.f), back(32, 1.f);
  std::vector<std::byte> row(32);
  float scale = -1.f;
  kv_store_row(KvDtype::Fp8E4M3, zeros.data(), 32, row.data(), &scale);
  EXPECT_EQ(scale, 0.f);
  kv_load_row(KvDtype::Fp8E4M3, row.data(), scale, 32, back.data());
  for (float v : back) EXPECT_EQ(v, 0.f);
}

TEST(KvDtypeNames, ParseAndName) {
  for (KvDtype t : {KvDtype::F32, KvDtype::BF16, KvDtype::Fp8E4M3}) EXPECT_EQ(parse_kv_dtype(kv_dtype_name(t)), t);
  EXPECT_EQ(parse_kv_dtype("fp8_e4m3"), KvDtype::Fp8E4M3);
  EXPECT_FALSE(parse_kv_dtype("fp8_e5m2").has_value());
  EXPECT_EQ(kv_elem_bytes(KvDtype::Fp8E4M3), 1u);
}

}  // namespace
}  // namespace ds
