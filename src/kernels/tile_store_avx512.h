// Writing an M x NV tile of 16-wide f32 accumulators to y (masked at the last, partial panel),
// shared by the AVX-512 matmul kernels. Include only from *_avx512.cpp files.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstddef>

namespace ds::detail {

template <int M, int NV>
inline void store_tile(__m512 (&acc)[M][NV], float* y, size_t ldy, int p, int n, bool accumulate) {
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) {
      const int col = (p + v) * 16;
      float* dst = y + size_t(r) * ldy + size_t(col);
      const int lanes = std::min(16, n - col);
      if (lanes <= 0) continue;
      const __mmask16 mask = lanes == 16 ? __mmask16(0xffff) : __mmask16((1u << lanes) - 1);
      __m512 out = acc[r][v];
      if (accumulate) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, dst));
      _mm512_mask_storeu_ps(dst, mask, out);
    }
}

}  // namespace ds::detail
