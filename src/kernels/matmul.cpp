#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

namespace ds {

namespace {
// Packed weights are what decode streams: large ones go on huge pages (core/huge_pages.h).
std::shared_ptr<void> aligned_buffer(size_t bytes) {
  LargeBuffer b = allocate_large(bytes);
  std::memset(b.get(), 0, std::max<size_t>(bytes, 1));
  return std::shared_ptr<void>(b.release(), [](void* q) { std::free(q); });
}
}  // namespace

PackedWeight pack_weight(const void* src, DType src_dtype, int n, int k) {
  DS_CHECK(n > 0 && k > 0, "pack_weight: empty matrix " + std::to_string(n) + "x" + std::to_string(k));
  PackedWeight w;
  w.n = n;
  w.k = k;
  w.n_pad = (n + 15) / 16 * 16;
  if (src_dtype == DType::BF16) {
    w.dtype = DType::BF16;
    w.k_pad = (k + 1) / 2 * 2;
    w.data = aligned_buffer(w.bytes());
    auto* dst = static_cast<uint16_t*>(w.data.get());
    const auto* s = static_cast<const uint16_t*>(src);
    const int kp = w.k_pad / 2;
    for (int r = 0; r < n; ++r) {
      const int panel = r / 16, lane = r % 16;
      for (int c = 0; c < k; ++c) {
        size_t off = ((size_t(panel) * kp + size_t(c / 2)) * 16 + size_t(lane)) * 2 + size_t(c % 2);
        dst[off] = s[size_t(r) * size_t(k) + size_t(c)];
      }
    }
  } else {
    w.dtype = DType::F32;
    w.k_pad = k;
    w.data = aligned_buffer(w.bytes());
    auto* dst = static_cast<float*>(w.data.get());
    for (int r = 0; r < n; ++r) {
      const int panel = r / 16, lane = r % 16;
      for (int c = 0; c < k; ++c) {
        dst[(size_t(panel) * size_t(k) + size_t(c)) * 16 + size_t(lane)] =
            load_as_f32(src, src_dtype, size_t(r) * size_t(k) + size_t(c));
      }
    }
  }
  return w;
}

namespace detail {
void matmul_panels_scalar(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                          int m, int p0, int p1, bool accumulate) {
  for (int p = p0; p < p1; ++p) {
    const int lanes = std::min(16, w.n - p * 16);
    for (int r = 0; r < m; ++r) {
      float acc[16] = {};
      const float* xr = x + size_t(r) * ldx;
      if (w.dtype == DType::F32) {
        const float* wp = static_cast<const float*>(w.data.get()) + size_t(p) * size_t(w.k) * 16;
        for (int c = 0; c < w.k; ++c)
          for (int l = 0; l < 16; ++l) acc[l] += xr[c] * wp[size_t(c) * 16 + size_t(l)];
      } else {
        const uint16_t* wp =
            static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(w.k_pad) * 16;
        for (int c = 0; c < w.k; ++c)
          for (int l = 0; l < 16; ++l)
            acc[l] += xr[c] * bf16_to_f32(wp[(size_t(c / 2) * 16 + size_t(l)) * 2 + size_t(c % 2)]);
      }
      float* yr = y + size_t(r) * ldy + size_t(p) * 16;
      for (int l = 0; l < lanes; ++l) yr[l] = accumulate ? yr[l] + acc[l] : acc[l];
    }
  }
}
}  // namespace detail

namespace {

// How a weight's panels meet the activations: f32 products (f32 or bf16 panels), bf16 dot
// products on rounded activations, or integer dot products on int8 activation blocks.
enum class PanelPath { Plain, Bf16Dot, Quant };
PanelPath path_of(const PackedWeight& w) {
  if (w.quant != QuantFormat::None) return PanelPath::Quant;
  if (w.dtype == DType::BF16 && w.activations == ActivationDtype::BF16) return PanelPath::Bf16Dot;
  return PanelPath::Plain;
}

// Below about a million multiply-adds (~50 us on one core) waking a second thread costs more
// than it saves, and on a busy machine a descheduled worker can stall the whole step. But a
// decode row's time is its weight's read, not its arithmetic, and one core streams at about
// half the socket's rate: from 256 KiB (~13 us for one core) the read is split too. A decode
// step of bench-100m-dense read its attention projections (under a million multiply-adds
// each) at 24 GB/s on one thread beside its FFN's 50 on two; with them split, `generate`
// decoded at a median 323 tok/s against 242 (8 runs each, in turn; 512 KiB: 283).
bool splits(const ThreadPool* pool, int m, int n, int k, size_t bytes) {
  constexpr double kParallelMinMacs = 1 << 20;
  constexpr size_t kParallelMinBytes = size_t(256) << 10;
  return pool && pool->size() > 1 && (double(m) * double(n) * double(k) >= kParallelMinMacs || bytes >= kParallelMinBytes);
}

// This CPU's kernel among an AVX-512, an AVX2 and a scalar one.
template <class Kernel>
Kernel* for_isa(Isa isa, Kernel* avx512, Kernel* avx2, Kernel* scalar) {
  return isa == Isa::Avx512 ? avx512 : isa == Isa::Avx2 ? avx2 : scalar;
}

// One call's activations, prepared once for its path (rounded to bf16 pairs, or quantized to
// int8 blocks, into the calling thread's scratch: it grows to the largest step's rows once, then
// the step loop allocates nothing), then met by any panel range of any weight on that path.
// Each row is prepared the same way whatever its batch, so a row's result does not depend on
// its step.
class PreparedRows {
 public:
  PreparedRows(PanelPath path, const float* x, size_t ldx, int m, int k, ThreadPool* pool) : path_(path), x_(x), ldx_(ldx), m_(m) {
    static const Isa isa = active_isa();
    const bool split_rows = pool && pool->size() > 1 && m >= 16;
    if (path == PanelPath::Quant) {
      thread_local std::vector<std::byte> scratch;
      const size_t need = quantized_activation_bytes(m, k);
      if (scratch.size() < need) scratch.resize(need);
      xa_ = quantized_activations_view(scratch.data(), m, k);
      if (split_rows)
        pool->parallel_for(size_t(m), 8, [&](size_t b, size_t e) { quantize_activation_rows(x, ldx, int(b), int(e), xa_); });
      else
        quantize_activation_rows(x, ldx, 0, m, xa_);
    } else if (path == PanelPath::Bf16Dot) {
      thread_local std::vector<uint32_t> scratch;
      ldxb_ = size_t((k + 1) / 2);
      if (scratch.size() < size_t(m) * ldxb_) scratch.resize(size_t(m) * ldxb_);
      xb_ = scratch.data();
      // No AVX2 rounding kernel: the scalar one serves AVX2 machines.
      auto* round_rows = for_isa(isa, &detail::round_rows_bf16_avx512, &detail::round_rows_bf16_scalar,
                                 &detail::round_rows_bf16_scalar);
      uint32_t* xb = scratch.data();
      const size_t ldxb = ldxb_;
      if (split_rows)
        pool->parallel_for(size_t(m), 8, [&](size_t b, size_t e) { round_rows(x + b * ldx, ldx, int(e - b), k, xb + b * ldxb, ldxb); });
      else
        round_rows(x, ldx, m, k, xb, ldxb);
    }
  }

  // Output panels [p0, p1) of w (on this path) into y.
  void panels(const PackedWeight& w, float* y, size_t ldy, int p0, int p1, bool accumulate) const {
    static const Isa isa = active_isa();
    switch (path_) {
      case PanelPath::Quant:
        return for_isa(isa, &detail::matmul_quant_panels_avx512, &detail::matmul_quant_panels_avx2,
                       &detail::matmul_quant_panels_scalar)(xa_, w, y, ldy, m_, p0, p1, accumulate);
      case PanelPath::Bf16Dot:
        return for_isa(isa, &detail::matmul_bf16dot_panels_avx512, &detail::matmul_bf16dot_panels_avx2,
                       &detail::matmul_bf16dot_panels_scalar)(xb_, ldxb_, w, y, ldy, m_, p0, p1, accumulate);
      case PanelPath::Plain:
        return for_isa(isa, &detail::matmul_panels_avx512, &detail::matmul_panels_avx2,
                       &detail::matmul_panels_scalar)(x_, ldx_, w, y, ldy, m_, p0, p1, accumulate);
    }
  }

 private:
  PanelPath path_;
  const float* x_;
  size_t ldx_;
  int m_;
  const uint32_t* xb_ = nullptr;
  size_t ldxb_ = 0;
  QuantizedActivations xa_{};
};

}  // namespace

void matmul(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int m,
            ThreadPool* pool, bool accumulate) {
  if (m <= 0) return;
  // A weight is a stack of one. Each part fills its own columns; parts on one path share one
  // preparation of the rows and one fork-join over all their panels (a KDA layer's input
  // projection is six parts, three of them too small to split on their own, and was six
  // fork-joins, one after another).
  const std::span<const PackedWeight> parts = w.parts.empty() ? std::span<const PackedWeight>(&w, 1) : std::span<const PackedWeight>(w.parts);
  const PanelPath path = path_of(parts.front());
  bool same = true;
  size_t bytes = 0;
  int panels = 0;
  for (const PackedWeight& p : parts) {
    same = same && path_of(p) == path && p.k_pad == parts.front().k_pad;
    bytes += p.bytes();
    panels += p.n_pad / 16;
  }
  if (!same) {
    size_t col = 0;
    for (const PackedWeight& p : parts) {
      matmul(x, ldx, p, y + col, ldy, m, pool, accumulate);
      col += size_t(p.n);
    }
    return;
  }
  const bool parallel = splits(pool, m, w.n, w.k, bytes);
  const PreparedRows rows(path, x, ldx, m, w.k, parallel ? pool : nullptr);
  // Global panel g lies in the part whose panels cover it.
  auto run = [&](size_t b, size_t e) {
    int first = 0;
    size_t col = 0;
    for (const PackedWeight& p : parts) {
      const int np = p.n_pad / 16;
      const int lo = std::max(int(b), first), hi = std::min(int(e), first + np);
      if (lo < hi) rows.panels(p, y + col, ldy, lo - first, hi - first, accumulate);
      first += np;
      col += size_t(p.n);
    }
  };
  // Whole panel groups of 4 per thread keep every thread on full-width microkernels.
  if (parallel)
    pool->parallel_for(size_t(panels), 4, run);
  else
    run(0, size_t(panels));
}

void matmul_reference(const float* x, size_t ldx, const void* w, DType dtype, int n, int k,
                      float* y, size_t ldy, int m) {
  for (int r = 0; r < m; ++r)
    for (int o = 0; o < n; ++o) {
      double acc = 0;
      for (int c = 0; c < k; ++c)
        acc += double(x[size_t(r) * ldx + size_t(c)]) * double(load_as_f32(w, dtype, size_t(o) * size_t(k) + size_t(c)));
      y[size_t(r) * ldy + size_t(o)] = float(acc);
    }
}

}  // namespace ds
