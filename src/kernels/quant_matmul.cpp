// Packing of quantized weights into panels (matmul.h says the layout), the quantizing of the
// activations (quant_activations.h) and the plain kernel.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/quant_activations.h"

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
  void* p = allocate_large(bytes).release();  // huge pages from 2 MiB up: decode streams it
  // Padded columns: zero scales, so whatever their codes they add nothing.
  std::memset(p, 0, std::max<size_t>(bytes, 1));
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
        // Each lane's 4 consecutive k in one dword, offset to unsigned (code + 128).
        for (int i = 0; i < kQuantBlock; ++i)
          cd[size_t(i / 4) * 64 + size_t(lane) * 4 + size_t(i % 4)] = uint8_t(rc[size_t(b) * kQuantBlock + size_t(i)] ^ 0x80u);
      } else {
        // Dword g of a lane: byte j holds k = 8g + j (low nibble) and 8g + 4 + j (high nibble).
        const uint8_t* bc = rc + size_t(b) * kQuantBlock / 2;
        auto code = [&](int i) { return uint8_t((bc[i / 2] >> (4 * (i % 2))) & 0x0f); };
        for (int g = 0; g < 4; ++g)
          for (int j = 0; j < 4; ++j)
            cd[size_t(g) * 64 + size_t(lane) * 4 + size_t(j)] = uint8_t(code(8 * g + j) | (code(8 * g + 4 + j) << 4));
      }
    }
  }
  return w;
}

// -- activations --------------------------------------------------------------------------

void quantize_activation_row(const float* x, int k, int8_t* q, float* d, int32_t* sum) {
  for (int b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + size_t(b) * kQuantBlock;
    float amax = 0.f;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int32_t s = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      // |x * inv| <= 127 for finite x; a NaN (a broken activation) becomes 0, as the AVX-512
      // conversion's low byte does, instead of an undefined float-to-int conversion.
      const float t = xb[i] * inv;
      const int v = std::isnan(t) ? 0 : int(std::nearbyint(t));
      q[size_t(b) * kQuantBlock + size_t(i)] = int8_t(v);
      s += v;
    }
    d[b] = amax / 127.f;
    sum[b] = s;
  }
}

size_t quantized_activation_bytes(int m, int k) {
  const size_t blocks = size_t(m) * size_t(k / kQuantBlock);
  return (size_t(m) * size_t(k) + 63) / 64 * 64 + blocks * (sizeof(float) + sizeof(int32_t));
}

QuantizedActivations quantized_activations_view(std::byte* scratch, int m, int k) {
  const size_t blocks = size_t(m) * size_t(k / kQuantBlock);
  QuantizedActivations a;
  a.k = k;
  a.q = reinterpret_cast<const int8_t*>(scratch);
  auto* d = reinterpret_cast<float*>(scratch + (size_t(m) * size_t(k) + 63) / 64 * 64);
  a.d = d;
  a.sum = reinterpret_cast<const int32_t*>(d + blocks);
  return a;
}

void quantize_activation_rows(const float* x, size_t ldx, int r0, int r1, const QuantizedActivations& out) {
  static const bool avx512 = active_isa() == Isa::Avx512;
  const int k = out.k, nb = k / kQuantBlock;
  for (int r = r0; r < r1; ++r) {
    auto* q = const_cast<int8_t*>(out.q) + size_t(r) * size_t(k);
    auto* d = const_cast<float*>(out.d) + size_t(r) * size_t(nb);
    auto* s = const_cast<int32_t*>(out.sum) + size_t(r) * size_t(nb);
    if (avx512) detail::quantize_activation_row_avx512(x + size_t(r) * ldx, k, q, d, s);
    else quantize_activation_row(x + size_t(r) * ldx, k, q, d, s);
  }
}

namespace detail {

// Codes as the unsigned bytes the integer dot products take (quant_weight_u8) and the offset
// that takes them back to the format's integers: Q8_0 stores q + 128; Q4_0's code q is
// q - 8 + 8; MXFP4's E2M1 value v is (2v + 12) / 2, so its unit is half the block scale.
const uint8_t kMxfp4Doubled[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
int quant_offset(QuantFormat f) { return f == QuantFormat::Q8_0 ? 128 : f == QuantFormat::Q4_0 ? 8 : 12; }

void matmul_quant_panels_scalar(const QuantizedActivations& xa, const PackedWeight& w, float* y, size_t ldy, int m,
                                int p0, int p1, bool accumulate) {
  const int blocks = w.k / kQuantBlock;
  const size_t pb = quant_panel_block_bytes(w.quant), sw = scale_width(w.quant);
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  const int offset = quant_offset(w.quant);
  const float unit = w.quant == QuantFormat::MXFP4 ? 0.5f : 1.f;
  for (int p = p0; p < p1; ++p) {
    const int lanes = std::min(16, w.n - p * 16);
    for (int r = 0; r < m; ++r) {
      const int8_t* xr = xa.q + size_t(r) * size_t(w.k);
      float acc[16] = {};
      for (int b = 0; b < blocks; ++b) {
        const uint8_t* blk = base + (size_t(p) * size_t(blocks) + size_t(b)) * pb;
        const uint8_t* cd = blk + 16 * sw;
        const int8_t* xb = xr + size_t(b) * kQuantBlock;
        const float dx = xa.d[size_t(r) * size_t(blocks) + size_t(b)] * unit;
        const int32_t corr = offset * xa.sum[size_t(r) * size_t(blocks) + size_t(b)];
        for (int l = 0; l < 16; ++l) {
          int32_t dot = 0;
          for (int i = 0; i < kQuantBlock; ++i) {
            uint8_t u;
            if (w.quant == QuantFormat::Q8_0) {
              u = cd[size_t(i / 4) * 64 + size_t(l) * 4 + size_t(i % 4)];
            } else {
              const uint8_t byte = cd[size_t(i / 8) * 64 + size_t(l) * 4 + size_t(i % 4)];
              const uint8_t code = (i % 8) < 4 ? byte & 0x0f : byte >> 4;
              u = w.quant == QuantFormat::Q4_0 ? code : kMxfp4Doubled[code];
            }
            dot += int32_t(u) * int32_t(xb[i]);
          }
          acc[l] = std::fma(float(dot - corr), quant_block_scale(w.quant, blk, l) * dx, acc[l]);
        }
      }
      float* yr = y + size_t(r) * ldy + size_t(p) * 16;
      for (int l = 0; l < lanes; ++l) yr[l] = accumulate ? yr[l] + acc[l] : acc[l];
    }
  }
}

}  // namespace detail
}  // namespace ds
