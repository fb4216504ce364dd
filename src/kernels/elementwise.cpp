#include "kernels/elementwise.h"

#include <cmath>

#include "kernels/fast_math.h"
#include "kernels/simd.h"

namespace ds {

namespace {
// The sum of squares as kSquareLanes running sums folded pairwise at the end. One running sum is
// a chain of dependent additions the compiler may not reorder (no -ffast-math), which kept the
// norms scalar at about 4 cycles an element, on the engine thread's path at every layer (a
// concurrency-16 profile of bench-100m-dense: rmsnorm 1.2% of both cores). The order is the
// source's, so every ISA version gives the same bits (-std=c++20 contracts no FMAs).
constexpr int kSquareLanes = 16;
[[gnu::always_inline]] inline float sum_squares(const float* x, int n) {
  float acc[kSquareLanes] = {};
  const int nl = n / kSquareLanes * kSquareLanes;
  for (int i = 0; i < nl; i += kSquareLanes)
    for (int j = 0; j < kSquareLanes; ++j) acc[j] += x[i + j] * x[i + j];
  for (int w = kSquareLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  float ss = acc[0];
  for (int i = nl; i < n; ++i) ss += x[i] * x[i];
  return ss;
}
}  // namespace

DS_MULTIVERSION void rmsnorm(const float* x, const float* w, float eps, float* out, int dim) {
  const float ss = sum_squares(x, dim);
  const float r = 1.f / std::sqrt(ss / float(dim) + eps);
  for (int i = 0; i < dim; ++i) out[i] = x[i] * r * w[i];
}

DS_MULTIVERSION void l2norm_scale(float* x, int dim, float eps, float scale) {
  const float ss = sum_squares(x, dim);
  const float r = scale / std::sqrt(ss + eps);
  for (int i = 0; i < dim; ++i) x[i] *= r;
}

DS_MULTIVERSION void silu_mul(const float* gate, const float* up, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = silu_fast(gate[i]) * up[i];
}

DS_MULTIVERSION void silu_inplace(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = silu_fast(x[i]);
}

DS_MULTIVERSION void mul_sigmoid(float* x, const float* g, int n) {
  for (int i = 0; i < n; ++i) x[i] *= sigmoid_fast(g[i]);
}

DS_MULTIVERSION void axpy(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

void row_to_f32(const void* table, DType dtype, size_t row, int dim, float* out) {
  const size_t base = row * size_t(dim);
  switch (dtype) {
    case DType::F32:
      for (int i = 0; i < dim; ++i) out[i] = static_cast<const float*>(table)[base + size_t(i)];
      break;
    case DType::BF16:
      for (int i = 0; i < dim; ++i) out[i] = bf16_to_f32(static_cast<const uint16_t*>(table)[base + size_t(i)]);
      break;
    case DType::F16:
      for (int i = 0; i < dim; ++i) out[i] = f16_to_f32(static_cast<const uint16_t*>(table)[base + size_t(i)]);
      break;
    case DType::I8:
    case DType::U8:
      for (int i = 0; i < dim; ++i) out[i] = load_as_f32(table, dtype, base + size_t(i));
      break;
  }
}

}  // namespace ds
