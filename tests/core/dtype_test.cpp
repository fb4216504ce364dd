// Conversions every checkpoint load goes through, on fixed bit patterns worked out by hand (not
// through the functions under test): bf16 is the high half of an f32 with round-to-nearest-even,
// f16 is IEEE binary16.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds {
namespace {

TEST(DType, Bf16IsTheHighHalfRoundedToNearestEven) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between bf16 1.0 (0x3f80) and 1.0078125 (0x3f81): even wins.
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1.0078125 + 2^-8 is half-way between 0x3f81 and 0x3f82: even (0x3f82) wins.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  // Just above half-way rounds up.
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.00390625f, 2.f)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
}

TEST(DType, F16RoundTripsItsOwnValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);       // largest normal
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);       // smallest subnormal
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  for (uint32_t h = 0; h < 0x7c00; h += 7) EXPECT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << h;
}

TEST(DType, ParsesSafetensorsAndShortNames) {
  DType t;
  ASSERT_TRUE(parse_dtype("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  ASSERT_TRUE(parse_dtype("f32", &t));
  EXPECT_EQ(t, DType::F32);
  ASSERT_TRUE(parse_dtype("I8", &t));  // quantized weights' codes
  EXPECT_EQ(t, DType::I8);
  ASSERT_TRUE(parse_dtype("uint8", &t));
  EXPECT_EQ(t, DType::U8);
  EXPECT_FALSE(parse_dtype("int4", &t));
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::I8), 1u);
  EXPECT_EQ(dtype_name(DType::U8), "U8");
}

}  // namespace
}  // namespace ds
