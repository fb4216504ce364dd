// Linear layers: y[m, n] = sum_k x[m, k] * W[n, k], W as stored by PyTorch ([out, in]).
//
// Weights are repacked once at load into panels of 16 output columns so that one 512-bit load
// feeds 16 outputs: f32 panels are [n/16][k][16]; bf16 panels are [n/16][k/2][16][2] (pairs of
// consecutive k, the operand order of AVX-512 BF16 dot products). Products are always
// accumulated in f32 from exact bf16 -> f32 widening, so the result differs from the reference
// only by summation order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/activation_dtype.h"
#include "core/dtype.h"
#include "kernels/quant_activations.h"
#include "kernels/quant_formats.h"

namespace ds {

class ThreadPool;

// Quantized weights (quant != None) are packed in the same 16-column panels, cut along k into
// blocks of 32: one panel block holds the 16 columns' scales (f16, or E8M0 bytes for MXFP4) and
// then their codes in the operand order of a 4-byte integer dot product (vpdpbusd): 64-byte
// rows of 16 lanes x one dword. Q8_0: dword g of a lane holds its k = 4g..4g+3 as code + 128
// (unsigned); 4-bit: dword g holds k = 8g..8g+3 in the low nibbles and 8g+4..8g+7 in the high
// ones. quant_panel_block_bytes() gives its size; the packed bytes are what decode reads:
// 1.0625 bytes per weight for Q8_0, 0.5625 for Q4_0 and 0.53125 for MXFP4. The activations
// meet them as int8 blocks (kernels/quant_activations.h).
struct PackedWeight {
  DType dtype = DType::F32;  // F32 or BF16 (F16 checkpoints are widened to F32 at pack time)
  QuantFormat quant = QuantFormat::None;
  int n = 0, k = 0;          // logical out / in sizes
  int n_pad = 0, k_pad = 0;  // n rounded up to 16, k rounded up to 2 (bf16)
  std::shared_ptr<void> data;
  // Set: this weight is these weights stacked along n (in order), each with its own format (a
  // stack whose parts were quantized differently, or quantized and kept); data is unused.
  std::vector<PackedWeight> parts;
  // BF16 weights only: the type the activations are rounded to before their products
  // (core/activation_dtype.h). Set it with set_activation_dtype(), which reaches a stack's parts.
  ActivationDtype activations = ActivationDtype::F32;

  size_t bytes() const;
  bool empty() const { return n == 0; }
};

size_t quant_panel_block_bytes(QuantFormat f);

// Sets how activations meet w (and every part of a stack); a no-op for F32 and quantized weights.
void set_activation_dtype(PackedWeight& w, ActivationDtype a);

// Packs a row-major [n, k] tensor of type src_dtype. F16 becomes F32 panels.
PackedWeight pack_weight(const void* src, DType src_dtype, int n, int k);
// Stacks weights of the same k along n into one (PackedWeight::parts); one part is returned as is.
PackedWeight stack_weights(std::vector<PackedWeight> parts);
// Packs a quantized [n, k] weight (k a multiple of 32) from its checkpoint codes and scales,
// row-major as quant_formats.h lays them out.
PackedWeight pack_quantized_weight(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int n, int k);

// y[m, n] (row stride ldy) = x[m, k] (row stride ldx) * W^T; accumulate adds into y.
// Splits output panels across the pool's threads (pool may be null: one thread).
void matmul(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int m,
            ThreadPool* pool, bool accumulate = false);

// The plain reference: row-major unpacked weights, double accumulation. For a weight served with
// bf16 activations, give it the rounded activations (round_to_bf16_exact below).
void matmul_reference(const float* x, size_t ldx, const void* w, DType dtype, int n, int k,
                      float* y, size_t ldy, int m);

namespace detail {
// ISA-specific panel kernels: compute output panels [p0, p1) for all m rows.
void matmul_panels_avx512(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                          int m, int p0, int p1, bool accumulate);
void matmul_panels_avx2(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                        int m, int p0, int p1, bool accumulate);
void matmul_panels_scalar(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                          int m, int p0, int p1, bool accumulate);
// Quantized weights, on int8 activations: per block of 32, an exact integer dot product of the
// codes with the activation's q, scaled by both blocks' scales (quant_activations.h says what
// quantizing the activations costs in precision). Every ISA computes the same integers and the
// same float operations in the same order.
void matmul_quant_panels_avx512(const QuantizedActivations& x, const PackedWeight& w, float* y, size_t ldy, int m,
                                int p0, int p1, bool accumulate);
void matmul_quant_panels_avx2(const QuantizedActivations& x, const PackedWeight& w, float* y, size_t ldy, int m,
                              int p0, int p1, bool accumulate);
void matmul_quant_panels_scalar(const QuantizedActivations& x, const PackedWeight& w, float* y, size_t ldy, int m,
                                int p0, int p1, bool accumulate);
// BF16 weights with bf16 activations (PackedWeight::activations). The activations are first
// rounded to bf16 the way vcvtne2ps2bf16 does it: to nearest even, a subnormal to a zero of its
// sign, a NaN quieted. Each row becomes pairs of consecutive k in one uint32 (the even k in the
// low half), k_pad / 2 of them; an odd k's last pair has 0 in its high half.
void round_rows_bf16_scalar(const float* x, size_t ldx, int m, int k, uint32_t* out, size_t ldo);
void round_rows_bf16_avx512(const float* x, size_t ldx, int m, int k, uint32_t* out, size_t ldo);
// Then per pair, for each output: acc += x[2i+1] * w[2i+1], rounded to f32, then acc += x[2i] *
// w[2i], rounded: the order of vdpbf16ps's own definition, which the AVX-512 kernel executes and
// the others reproduce with FMAs (a bf16 x bf16 product is exact in f32, so an FMA of it rounds
// only the sum). They are bit-identical to each other except where a weight, a product or a
// partial sum is subnormal, which vdpbf16ps flushes to zero.
void matmul_bf16dot_panels_avx512(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                  int m, int p0, int p1, bool accumulate);
void matmul_bf16dot_panels_avx2(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                int m, int p0, int p1, bool accumulate);
void matmul_bf16dot_panels_scalar(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                  int m, int p0, int p1, bool accumulate);
// One f32 rounded as round_rows_bf16_* rounds it, returned as the f32 it now equals.
float round_to_bf16_exact(float x);

// The unsigned byte an MXFP4 code stands for in those dot products (2 * E2M1 + 12), and each
// format's offset (what the bytes exceed the format's integers by).
extern const uint8_t kMxfp4Doubled[16];
int quant_offset(QuantFormat f);
}  // namespace detail

}  // namespace ds
