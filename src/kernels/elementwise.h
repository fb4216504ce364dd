// Row-wise and element-wise kernels of the forward pass: norms, activations, residuals.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ds {

// out = x * rsqrt(mean(x^2) + eps) * w, per row of `dim` (x, out may alias).
void rmsnorm(const float* x, const float* w, float eps, float* out, int dim);
// x *= rsqrt(sum(x^2) + eps) * scale
void l2norm_scale(float* x, int dim, float eps, float scale);
// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, int n);
// x[i] = silu(x[i])
void silu_inplace(float* x, int n);
// x[i] *= sigmoid(g[i])
void mul_sigmoid(float* x, const float* g, int n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int n);
// Copies an embedding row of any dtype into f32.
void row_to_f32(const void* table, DType dtype, size_t row, int dim, float* out);

inline float sigmoidf(float x) { return 1.f / (1.f + __builtin_expf(-x)); }

}  // namespace ds
