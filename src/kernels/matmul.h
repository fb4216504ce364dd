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

#include "core/dtype.h"

namespace ds {

class ThreadPool;

struct PackedWeight {
  DType dtype = DType::F32;  // F32 or BF16 (F16 checkpoints are widened to F32 at pack time)
  int n = 0, k = 0;          // logical out / in sizes
  int n_pad = 0, k_pad = 0;  // n rounded up to 16, k rounded up to 2 (bf16)
  std::shared_ptr<void> data;

  size_t bytes() const { return size_t(n_pad) * size_t(k_pad) * dtype_size(dtype); }
  bool empty() const { return n == 0; }
};

// Packs a row-major [n, k] tensor of type src_dtype. F16 becomes F32 panels.
PackedWeight pack_weight(const void* src, DType src_dtype, int n, int k);

// y[m, n] (row stride ldy) = x[m, k] (row stride ldx) * W^T; accumulate adds into y.
// Splits output panels across the pool's threads (pool may be null: one thread).
void matmul(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int m,
            ThreadPool* pool, bool accumulate = false);

// The plain reference: row-major unpacked weights, double accumulation.
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
}  // namespace detail

}  // namespace ds
