// Block-quantized weight formats: every row of a [n, k] weight is cut into blocks of 32
// consecutive values along k, each stored as 32 small codes and one scale.
//
//   Q8_0   codes int8 q in [-127, 127], scale d (f16):         w = d * q
//   Q4_0   codes 4-bit q in [0, 15], scale d (f16):             w = d * (q - 8)
//   MXFP4  codes 4-bit E2M1 (OCP microscaling: sign, 2 exponent bits, 1 mantissa bit; values
//          0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), scale an E8M0 byte e: w = 2^(e-127) * v
//
// In a checkpoint a quantized linear "X.weight" is two tensors: the codes as "X.weight" (Q8_0:
// I8 [n, k]; Q4_0 and MXFP4: U8 [n, k/2], the even k in the low nibble) and the scales as
// "X.weight_scale" (Q8_0, Q4_0: F16 [n, k/32]; MXFP4: U8 [n, k/32]). The pair of dtypes names
// the format, and the file's metadata records it too (convert/quantize.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace ds {

enum class QuantFormat : uint8_t { None, Q8_0, Q4_0, MXFP4 };

inline constexpr int kQuantBlock = 32;

std::string_view quant_format_name(QuantFormat f);  // "q8_0", "q4_0", "mxfp4", "none"
bool parse_quant_format(std::string_view s, QuantFormat* out);

// Bytes of one row's codes and of its scales, for k a multiple of 32.
size_t quant_code_bytes(QuantFormat f, int k);
size_t quant_scale_bytes(QuantFormat f, int k);
// The checkpoint dtypes of codes and scales.
DType quant_code_dtype(QuantFormat f);
DType quant_scale_dtype(QuantFormat f);
// The format a (codes, scales) dtype pair names, or None.
QuantFormat quant_format_of(DType codes, DType scales);

// One row of k values (k a multiple of 32) to codes and scales, and back. Dequantizing is
// exact: every w above is representable in f32.
void quantize_row(QuantFormat f, const float* x, int k, uint8_t* codes, uint8_t* scales);
void dequantize_row(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int k, float* out);

// The scale of block b as f32.
float quant_block_scale(QuantFormat f, const uint8_t* scales, int b);
// The 16 values a 4-bit code stands for, before the scale (Q4_0: q - 8; MXFP4: E2M1).
const float* quant4_values(QuantFormat f);

}  // namespace ds
