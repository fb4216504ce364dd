#include "checkpoint/ggml_blocks.h"

#include <cstring>

#include "checkpoint/gguf_file.h"

namespace ds {

uint32_t ggml_type_of(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q8_0: return uint32_t(GgmlType::Q8_0);
    case QuantFormat::Q4_0: return uint32_t(GgmlType::Q4_0);
    case QuantFormat::MXFP4: return uint32_t(GgmlType::MXFP4);
    case QuantFormat::None: break;
  }
  return uint32_t(GgmlType::F32);
}

QuantFormat quant_format_of_ggml(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::Q8_0: return QuantFormat::Q8_0;
    case GgmlType::Q4_0: return QuantFormat::Q4_0;
    case GgmlType::MXFP4: return QuantFormat::MXFP4;
    default: return QuantFormat::None;
  }
}

namespace {

size_t scale_bytes(QuantFormat f) { return f == QuantFormat::MXFP4 ? 1 : 2; }
size_t block_bytes(QuantFormat f) { return scale_bytes(f) + (f == QuantFormat::Q8_0 ? 32 : 16); }

}  // namespace

void ggml_blocks_to_codes(QuantFormat f, const std::byte* blocks, int64_t rows, int k, uint8_t* codes, uint8_t* scales) {
  const int nb = k / kQuantBlock;
  const size_t sb = scale_bytes(f), bb = block_bytes(f);
  const auto* src = reinterpret_cast<const uint8_t*>(blocks);
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < nb; ++b, src += bb) {
      std::memcpy(scales, src, sb);
      scales += sb;
      const uint8_t* q = src + sb;
      if (f == QuantFormat::Q8_0) {
        std::memcpy(codes, q, 32);
        codes += 32;
        continue;
      }
      // element i: ggml's byte i % 16, low nibble for i < 16; ours byte i / 2, low for even i
      for (int j = 0; j < 16; ++j) {
        const int e0 = 2 * j, e1 = 2 * j + 1;
        const uint8_t n0 = e0 < 16 ? (q[e0] & 0x0f) : (q[e0 - 16] >> 4);
        const uint8_t n1 = e1 < 16 ? (q[e1] & 0x0f) : (q[e1 - 16] >> 4);
        codes[j] = uint8_t(n0 | (n1 << 4));
      }
      codes += 16;
    }
}

void codes_to_ggml_blocks(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int k, std::byte* blocks) {
  const int nb = k / kQuantBlock;
  const size_t sb = scale_bytes(f), bb = block_bytes(f);
  auto* dst = reinterpret_cast<uint8_t*>(blocks);
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < nb; ++b, dst += bb) {
      std::memcpy(dst, scales, sb);
      scales += sb;
      uint8_t* q = dst + sb;
      if (f == QuantFormat::Q8_0) {
        std::memcpy(q, codes, 32);
        codes += 32;
        continue;
      }
      auto nib = [&](int i) { return uint8_t(i % 2 == 0 ? (codes[i / 2] & 0x0f) : (codes[i / 2] >> 4)); };
      for (int j = 0; j < 16; ++j) q[j] = uint8_t(nib(j) | (nib(j + 16) << 4));
      codes += 16;
    }
}

}  // namespace ds
