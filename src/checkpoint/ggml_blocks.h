// ggml's block layouts of Q8_0, Q4_0 and MXFP4, to and from the checkpoint layout of
// kernels/quant_formats.h (codes and scales as two row-major tensors).
//
// ggml interleaves each block's scale with its codes: Q8_0 {f16 d; i8 q[32]}, Q4_0 {f16 d;
// u8 q[16]}, MXFP4 {u8 e; u8 q[16]}. In the 4-bit blocks byte j holds element j in its low
// nibble and element j + 16 in its high one; the checkpoint layout holds elements 2j and 2j + 1.
// The values are the same: Q4_0 is d * (q - 8) in both; ggml's MXFP4 table is the E2M1 values
// doubled with the scale halved (2^(e-128)), which is 2^(e-127) * E2M1 exactly. So converting
// moves bytes and nibbles, and never changes a weight.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/quant_formats.h"

namespace ds {

// The ggml type id of a format (checkpoint/gguf_file.h's GgmlType), and back (None for another id).
uint32_t ggml_type_of(QuantFormat f);
QuantFormat quant_format_of_ggml(uint32_t ggml_type);

// rows x k values (k a multiple of 32): ggml blocks <-> checkpoint codes + scales.
void ggml_blocks_to_codes(QuantFormat f, const std::byte* blocks, int64_t rows, int k, uint8_t* codes, uint8_t* scales);
void codes_to_ggml_blocks(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int k, std::byte* blocks);

}  // namespace ds
