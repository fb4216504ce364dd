// What the AVX-512 matmul kernels share: writing an M x NV tile of 16-wide f32 accumulators to
// y (masked at the last, partial panel), and the walk over row blocks and panel groups. Include
// only from *_avx512.cpp files.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "kernels/matmul.h"

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

// rows_fn[r] computes r rows (1..8) over panels [pg, pe). Rows are taken in blocks whose
// activations stay in L2 while this thread's panels stream past them; within a block, panel
// groups are outermost so a group stays in L1/L2 across the 8-row tiles. X is the activations'
// element (f32, or bf16 pairs as uint32); a row of x is ldx of them.
template <typename X>
using RowsFnOf = void (*)(const X*, size_t, const PackedWeight&, float*, size_t, int, int, bool);
using RowsFn = RowsFnOf<float>;

template <typename X>
inline void walk_row_tiles(const RowsFnOf<X> (&rows_fn)[9], const X* x, size_t ldx, const PackedWeight& w, float* y,
                           size_t ldy, int m, int p0, int p1, bool accumulate) {
  // One x element holds one k (f32) or two (bf16 pairs).
  const size_t row_bytes = std::max<size_t>(1, size_t(w.k) * (std::is_same_v<X, float> ? 4 : 2));
  const int row_block = std::max(8, int((256 * 1024) / row_bytes) / 8 * 8);
  for (int rb = 0; rb < m; rb += row_block) {
    const int re = std::min(m, rb + row_block);
    // 12 panels: whole tiles for every tile width (4, 3 or 2 panels), where 8 left 5-8-row
    // bf16 tiles (3 panels) a single-panel remainder twice per group.
    const int group = 12;
    for (int pg = p0; pg < p1; pg += group) {
      const int pe = std::min(p1, pg + group);
      for (int r = rb; r < re; r += 8) {
        const int rows = std::min(8, re - r);
        rows_fn[rows](x + size_t(r) * ldx, ldx, w, y + size_t(r) * ldy, ldy, pg, pe, accumulate);
      }
    }
  }
}

}  // namespace ds::detail
