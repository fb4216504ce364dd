// The activations of a quantized matmul, quantized per row to int8 blocks of 32 (Q8_0 of the
// activations) so that the weights' integer codes meet them in integer dot products: AVX-512
// VNNI's vpdpbusd multiplies 64 byte pairs per instruction, where widening every code to f32
// cost several instructions per 16 weights and left decode bound by arithmetic, not memory.
//
// A block of 32 values x gets d = max|x| / 127 and q = nearbyint(x * (127 / max|x|)) in
// [-127, 127] (all zero for a block of zeros), and the sum of its q. Each x moves by at most
// d / 2 (half a step of 127 per block maximum), so a dot product with a row of weights moves by
// at most d / 2 * sum|w| per block: the price of the integer path, which the tests bound and
// tests/convert/quantized_quality_test.cpp measures end to end (held-out bits per byte).
// Quantizing is per row and per block, so a row's result does not depend on which rows share
// its step (batch invariance).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ds {

struct QuantizedActivations {
  const int8_t* q = nullptr;     // [m][k]
  const float* d = nullptr;      // [m][k / 32] the blocks' scales
  const int32_t* sum = nullptr;  // [m][k / 32] the blocks' sums of q
  int k = 0;
};

// The definition: one row of k values (k a multiple of 32).
void quantize_activation_row(const float* x, int k, int8_t* q, float* d, int32_t* sum);

// Scratch bytes for m rows of k, and the quantizing of them into it (rows [r0, r1) only, so
// threads can split the rows); the AVX-512 form gives the same bytes as the definition.
size_t quantized_activation_bytes(int m, int k);
QuantizedActivations quantized_activations_view(std::byte* scratch, int m, int k);
void quantize_activation_rows(const float* x, size_t ldx, int r0, int r1, const QuantizedActivations& out);

namespace detail {
void quantize_activation_row_avx512(const float* x, int k, int8_t* q, float* d, int32_t* sum);
}  // namespace detail

}  // namespace ds
