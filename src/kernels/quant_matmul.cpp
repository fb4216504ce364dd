// Packing of quantized weights into panels (matmul.h says the layout) and the plain kernel.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/matmul.h"

namespace ds {

size_t quant_panel_block_bytes(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q8_0: return 32 + 16 * 32;
    case QuantFormat::Q4_0: return 32 + 16 * 16;
    case QuantFormat::MXFP4: return 16 + 16 * 16;
    case QuantFormat::None: break;
  }
  return 0;
}

size_t PackedWeight::bytes() const {
  if (!parts.empty()) {
    size_t b = 0;
    for (const PackedWeight& p : parts) b += p.bytes();
    return b;
  }
  if (quant != QuantFormat::None) return size_t(n_pad / 16) * size_t(k_pad / kQuantBlock) * quant_panel_block_bytes(quant);
  return size_t(n_pad) * size_t(k_pad) * dtype_size(dtype);
}

namespace {
size_t scale_width(QuantFormat f) { return f == QuantFormat::MXFP4 ? 1 : 2; }
}  // namespace

PackedWeight stack_weights(std::vector<PackedWeight> parts) {
  DS_CHECK(!parts.empty(), "stack_weights: nothing to stack");
  if (parts.size() == 1) return std::move(parts.front());
  PackedWeight w;
  w.k = parts.front().k;
  for (const PackedWeight& p : parts) {
    DS_CHECK(p.k == w.k && p.parts.empty(), "stack_weights: parts of different input sizes");
    w.n += p.n;
  }
  w.n_pad = w.n;
  w.k_pad = w.k;
  w.parts = std::move(parts);
  return w;
}

PackedWeight pack_quantized_weight(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int n, int k) {
  DS_CHECK(f != QuantFormat::None, "pack_quantized_weight: no format");
  DS_CHECK(n > 0 && k > 0 && k % kQuantBlock == 0,
           "pack_quantized_weight: a " + std::string(quant_format_name(f)) + " weight needs k a multiple of 32, got " +
               std::to_string(n) + "x" + std::to_string(k));
  PackedWeight w;
  w.quant = f;
  w.dtype = DType::F32;  // unused for quantized weights
  w.n = n;
  w.k = k;
  w.n_pad = (n + 15) / 16 * 16;
  w.k_pad = k;
  const size_t bytes = w.bytes();
  void* p = std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  DS_CHECK(p, "pack_quantized_weight: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, (bytes + 63) & ~size_t(63));  // padded columns: zero scales and codes
  w.data = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  auto* dst = static_cast<uint8_t*>(p);
  const int blocks = k / kQuantBlock;
  const size_t pb = quant_panel_block_bytes(f), sw = scale_width(f);
  const size_t row_codes = quant_code_bytes(f, k), row_scales = quant_scale_bytes(f, k);
  for (int r = 0; r < n; ++r) {
    const int panel = r / 16, lane = r % 16;
    const uint8_t* rc = codes + size_t(r) * row_codes;
    const uint8_t* rs = scales + size_t(r) * row_scales;
    for (int b = 0; b < blocks; ++b) {
      uint8_t* blk = dst + (size_t(panel) * size_t(blocks) + size_t(b)) * pb;
      std::memcpy(blk + size_t(lane) * sw, rs + size_t(b) * sw, sw);
      uint8_t* cd = blk + 16 * sw;
      if (f == QuantFormat::Q8_0) {
        for (int i = 0; i < kQuantBlock; ++i) cd[size_t(i) * 16 + size_t(lane)] = rc[size_t(b) * kQuantBlock + size_t(i)];
      } else {
        // The checkpoint's byte j holds k = 2j and 2j + 1: the same pairing, lane-interleaved.
        for (int j = 0; j < kQuantBlock / 2; ++j) cd[size_t(j) * 16 + size_t(lane)] = rc[size_t(b) * kQuantBlock / 2 + size_t(j)];
      }
    }
  }
  return w;
}

namespace detail {

void matmul_quant_panels_scalar(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                                int m, int p0, int p1, bool accumulate) {
  const int blocks = w.k / kQuantBlock;
  const size_t pb = quant_panel_block_bytes(w.quant), sw = scale_width(w.quant);
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  const float* values4 = quant4_values(w.quant);
  for (int p = p0; p < p1; ++p) {
    const int lanes = std::min(16, w.n - p * 16);
    for (int r = 0; r < m; ++r) {
      const float* xr = x + size_t(r) * ldx;
      float acc[16] = {};
      for (int b = 0; b < blocks; ++b) {
        const uint8_t* blk = base + (size_t(p) * size_t(blocks) + size_t(b)) * pb;
        const uint8_t* cd = blk + 16 * sw;
        const float* xb = xr + size_t(b) * kQuantBlock;
        for (int l = 0; l < 16; ++l) {
          float s = 0;
          if (w.quant == QuantFormat::Q8_0) {
            for (int i = 0; i < kQuantBlock; ++i) s += xb[i] * float(int8_t(cd[size_t(i) * 16 + size_t(l)]));
          } else {
            for (int j = 0; j < kQuantBlock / 2; ++j) {
              const uint8_t byte = cd[size_t(j) * 16 + size_t(l)];
              s += xb[2 * j] * values4[byte & 0x0f] + xb[2 * j + 1] * values4[byte >> 4];
            }
          }
          acc[l] += s * quant_block_scale(w.quant, blk, l);
        }
      }
      float* yr = y + size_t(r) * ldy + size_t(p) * 16;
      for (int l = 0; l < lanes; ++l) yr[l] = accumulate ? yr[l] + acc[l] : acc[l];
    }
  }
}

}  // namespace detail
}  // namespace ds
