// AVX-512 panel kernels for matmul.h. A microkernel keeps an M x NV tile of 16-wide
// accumulators in registers and streams one panel group over the whole k range; bf16 pairs are
// widened to f32 with two integer ops (the low half shifted up, the high half masked) so every
// product is exact.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/tile_store_avx512.h"

namespace ds::detail {

namespace {

// Each k step of a tile reads one 64-byte line per panel. With 5-8 rows the FMAs take longer
// than the line takes to arrive, and the hardware prefetcher, paced by the loads, no longer runs
// far enough ahead to hide memory latency: the read and the arithmetic then add up instead of
// overlapping (BM_MatmulStream: 8 rows took 2.2x 4 rows' time). Lines this far ahead are asked
// for explicitly (not for 1-4 rows, whose loads keep the prefetcher ahead on their own).
constexpr size_t kPrefetchBytes = 1024;
[[gnu::always_inline]] inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

template <int M, int NV>
void tile_f32(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p,
              bool accumulate) {
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int k = w.k;
  const float* base = static_cast<const float*>(w.data.get()) + size_t(p) * size_t(k) * 16;
  const size_t panel_stride = size_t(k) * 16;
  for (int c = 0; c < k; ++c) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) {
      if constexpr (M > 4) prefetch_ahead(base + v * panel_stride + size_t(c) * 16);
      b[v] = _mm512_load_ps(base + v * panel_stride + size_t(c) * 16);
    }
    for (int r = 0; r < M; ++r) {
      const __m512 a = _mm512_set1_ps(x[size_t(r) * ldx + size_t(c)]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  store_tile<M, NV>(acc, y, ldy, p, w.n, accumulate);
}

template <int M, int NV>
void tile_bf16(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p,
               bool accumulate) {
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int pairs = w.k_pad / 2;
  const int full_pairs = w.k / 2;  // an odd k leaves a last pair whose high half is padding
  const uint16_t* base = static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(pairs) * 32;
  const size_t panel_stride = size_t(pairs) * 32;
  const __m512i hi_mask = _mm512_set1_epi32(int(0xffff0000u));
  for (int c = 0; c < full_pairs; ++c) {
    __m512 lo[NV], hi[NV];
    for (int v = 0; v < NV; ++v) {
      if constexpr (M > 4) prefetch_ahead(base + v * panel_stride + size_t(c) * 32);
      const __m512i raw = _mm512_load_si512(base + v * panel_stride + size_t(c) * 32);
      lo[v] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xffff), raw, 16));
      hi[v] = _mm512_castsi512_ps(_mm512_and_si512(raw, hi_mask));
    }
    for (int r = 0; r < M; ++r) {
      const float* xr = x + size_t(r) * ldx + size_t(2 * c);
      const __m512 a0 = _mm512_set1_ps(xr[0]);
      const __m512 a1 = _mm512_set1_ps(xr[1]);
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_fmadd_ps(a0, lo[v], acc[r][v]);
        acc[r][v] = _mm512_fmadd_ps(a1, hi[v], acc[r][v]);
      }
    }
  }
  if (full_pairs < pairs) {
    const int c = full_pairs;
    for (int v = 0; v < NV; ++v) {
      const __m512i raw = _mm512_load_si512(base + v * panel_stride + size_t(c) * 32);
      const __m512 lo = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xffff), raw, 16));
      for (int r = 0; r < M; ++r)
        acc[r][v] = _mm512_fmadd_ps(_mm512_set1_ps(x[size_t(r) * ldx + size_t(2 * c)]), lo, acc[r][v]);
    }
  }
  store_tile<M, NV>(acc, y, ldy, p, w.n, accumulate);
}

// The tile after the one computing, fetched into L2 while it computes (the streaming walk below),
// spread evenly over the passes the row blocks make over this one.
struct NextTile {
  const uint16_t* base = nullptr;  // its first panel; nullptr: nothing to fetch
  int panels = 0;
  int phase = 0, every = 1;        // this pass fetches the pairs c with c % every == phase
};

// bf16 activations (pairs in one dword, broadcast to every lane) against bf16 weight panels: one
// vdpbf16ps is 32 multiply-adds, where the f32 tile above spends two FMAs and two widening ops.
template <int M, int NV>
[[gnu::always_inline]] inline void tile_bf16dot(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y,
                                                size_t ldy, int p, bool accumulate, const NextTile& next = {}) {
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int pairs = w.k_pad / 2;
  const uint16_t* base = static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(pairs) * 32;
  const size_t panel_stride = size_t(pairs) * 32;
  int due = next.phase;  // the next pair whose lines of the next tile this pass fetches
  for (int c = 0; c < pairs; ++c) {
    if (next.base && c == due) {
      for (int v = 0; v < next.panels; ++v) _mm_prefetch(reinterpret_cast<const char*>(next.base + v * panel_stride + size_t(c) * 32), _MM_HINT_T1);
      due += next.every;
    }
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) {
      if constexpr (M > 4) prefetch_ahead(base + v * panel_stride + size_t(c) * 32);
      b[v] = (__m512bh)_mm512_load_si512(base + v * panel_stride + size_t(c) * 32);
    }
    for (int r = 0; r < M; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(xb[size_t(r) * ldxb + size_t(c)]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  store_tile<M, NV>(acc, y, ldy, p, w.n, accumulate);
}

template <int M>
void rows_panels_bf16dot(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy, int p0, int p1,
                         bool accumulate) {
  // 8 x 3 accumulators + 3 weight vectors + a broadcast fit the 32 registers.
  constexpr int NV = M <= 4 ? 4 : 3;
  int p = p0;
  for (; p + NV <= p1; p += NV) tile_bf16dot<M, NV>(xb, ldxb, w, y, ldy, p, accumulate);
  // A remainder of two panels as one tile: single-panel tiles do a broadcast per dot product and
  // ran about 30% slower (BM_Matmul at 8 rows with every tile single-panel: 430-475 against
  // 590-670 GFLOP/s).
  if constexpr (NV == 3)
    if (p + 2 <= p1) {
      tile_bf16dot<M, 2>(xb, ldxb, w, y, ldy, p, accumulate);
      p += 2;
    }
  for (; p < p1; ++p) tile_bf16dot<M, 1>(xb, ldxb, w, y, ldy, p, accumulate);
}

constexpr RowsFnOf<uint32_t> kRowsBf16dot[9] = {
    nullptr, rows_panels_bf16dot<1>, rows_panels_bf16dot<2>, rows_panels_bf16dot<3>, rows_panels_bf16dot<4>,
    rows_panels_bf16dot<5>, rows_panels_bf16dot<6>, rows_panels_bf16dot<7>, rows_panels_bf16dot<8>};

template <int M>
void rows_panels(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p0,
                 int p1, bool accumulate) {
  constexpr int NV = M <= 4 ? 4 : 2;
  const bool bf16 = w.dtype == DType::BF16;
  int p = p0;
  for (; p + NV <= p1; p += NV) {
    if (bf16) tile_bf16<M, NV>(x, ldx, w, y, ldy, p, accumulate);
    else tile_f32<M, NV>(x, ldx, w, y, ldy, p, accumulate);
  }
  for (; p < p1; ++p) {
    if (bf16) tile_bf16<M, 1>(x, ldx, w, y, ldy, p, accumulate);
    else tile_f32<M, 1>(x, ldx, w, y, ldy, p, accumulate);
  }
}

constexpr RowsFn kRows[9] = {nullptr,         rows_panels<1>, rows_panels<2>, rows_panels<3>,
                             rows_panels<4>,  rows_panels<5>, rows_panels<6>, rows_panels<7>,
                             rows_panels<8>};

}  // namespace

void matmul_panels_avx512(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int m, int p0,
                          int p1, bool accumulate) {
  walk_row_tiles(kRows, x, ldx, w, y, ldy, m, p0, p1, accumulate);
}

namespace {

using StripFn = void (*)(const uint32_t*, size_t, const PackedWeight&, float*, size_t, int, bool, const NextTile&);
template <int M, int NV>
void strip_bf16dot(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy, int p, bool accumulate,
                   const NextTile& next) {
  tile_bf16dot<M, NV>(xb, ldxb, w, y, ldy, p, accumulate, next);
}
template <int M>
constexpr StripFn kStrip[4] = {nullptr, strip_bf16dot<M, 1>, strip_bf16dot<M, 2>, strip_bf16dot<M, 3>};
constexpr const StripFn* kStrips[9] = {nullptr,     kStrip<1>, kStrip<2>, kStrip<3>, kStrip<4>,
                                       kStrip<5>, kStrip<6>, kStrip<7>, kStrip<8>};

// Verify chunks and decode at concurrency (5..64 rows): strips of 3 panels, each met by every
// 8-row block in turn while the next strip is fetched. walk_row_tiles reads a panel group from
// memory in its first row pass and computes from cache in the others with memory idle, and
// with one 5-8-row block its arithmetic outruns the prefetcher: the read and the arithmetic
// add up. Here memory streams the next strip the whole time (BM_FfnStream, 2 threads, medians:
// 16 rows 5.0 -> 4.2 ms, 32 rows 7.3 -> 6.2, 8 rows 3.15 -> 2.8; 1-4 rows, whose loads keep
// the prefetcher ahead on their own, were no faster). A strip of 3 panels and the next stay in
// L2 for k up to several thousand.
constexpr int kStreamingMinRows = 5, kStreamingMaxRows = 64;
void walk_strips_bf16dot(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy, int m, int p0,
                         int p1, bool accumulate) {
  const int blocks = (m + 7) / 8;
  const size_t panel_elems = size_t(w.k_pad / 2) * 32;
  const uint16_t* data = static_cast<const uint16_t*>(w.data.get());
  for (int p = p0; p < p1; p += 3) {
    const int width = std::min(3, p1 - p);
    NextTile next;
    if (p + 3 < p1) {
      next.base = data + size_t(p + 3) * panel_elems;
      next.panels = std::min(3, p1 - p - 3);
      next.every = blocks;
    }
    for (int b = 0; b < blocks; ++b) {
      const int r = 8 * b, rows = std::min(8, m - r);
      next.phase = b;
      kStrips[rows][width](xb + size_t(r) * ldxb, ldxb, w, y + size_t(r) * ldy, ldy, p, accumulate, next);
    }
  }
}

}  // namespace

void matmul_bf16dot_panels_avx512(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                  int m, int p0, int p1, bool accumulate) {
  if (m >= kStreamingMinRows && m <= kStreamingMaxRows)
    walk_strips_bf16dot(xb, ldxb, w, y, ldy, m, p0, p1, accumulate);
  else
    walk_row_tiles(kRowsBf16dot, xb, ldxb, w, y, ldy, m, p0, p1, accumulate);
}

void round_rows_bf16_avx512(const float* x, size_t ldx, int m, int k, uint32_t* out, size_t ldo) {
  // vcvtne2ps2bf16 rounds 32 floats to nearest even (subnormals to zero): its second operand
  // fills the low halves, so pairs of consecutive k land in one dword, low half the even one.
  const int pairs = (k + 1) / 2;
  for (int r = 0; r < m; ++r) {
    const float* xr = x + size_t(r) * ldx;
    uint32_t* o = out + size_t(r) * ldo;
    int c = 0;
    for (; 2 * c + 32 <= k; c += 16) {
      const __m512 a = _mm512_loadu_ps(xr + 2 * c), b = _mm512_loadu_ps(xr + 2 * c + 16);
      // One bf16 vector of k = 2c .. 2c+31 in order: b's 16 floats into the high half.
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(b, a);
      _mm512_storeu_si512(o + c, v);
    }
    if (c < pairs) {
      const int rest = k - 2 * c;  // 1..31 floats left
      const __mmask16 ma = rest >= 16 ? __mmask16(0xffff) : __mmask16((1u << rest) - 1);
      const __mmask16 mb = rest > 16 ? __mmask16((1u << (rest - 16)) - 1) : __mmask16(0);
      const __m512 a = _mm512_maskz_loadu_ps(ma, xr + 2 * c), b = _mm512_maskz_loadu_ps(mb, xr + 2 * c + 16);
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(b, a);
      const int left = pairs - c;
      _mm512_mask_storeu_epi32(o + c, __mmask16((1u << left) - 1), v);
    }
  }
}

}  // namespace ds::detail
