// GGUF files built byte by byte in the test from ggml's published definitions, not by
// DeltaServe's writer, so the reader is held to ggml and not to our own writer's idea of it.
//
// From ggml/src/ggml-common.h and ggml-quants.c (llama.cpp):
//   block_q8_0  { ggml_half d; int8_t qs[32]; }        y[j] = qs[j] * d
//   block_q4_0  { ggml_half d; uint8_t qs[16]; }       y[j] = ((qs[j] & 0x0F) - 8) * d,
//                                                      y[j + 16] = ((qs[j] >> 4) - 8) * d
//   block_mxfp4 { uint8_t e; uint8_t qs[16]; }         y[j] = kvalues_mxfp4[qs[j] & 0x0F] * d,
//                                                      y[j + 16] = kvalues_mxfp4[qs[j] >> 4] * d
//   kvalues_mxfp4 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} (E2M1 doubled)
//   d = ggml_e8m0_to_fp32_half(e): bits 0x00200000 << e for e < 2 (2^-128, 2^-127), else
//       (e - 1) << 23, i.e. 2^(e - 128), half the E8M0 scale to undo the doubled table.
//   F32, F16 (IEEE binary16), BF16 (the high half of an f32) stored as they are.
// And from ggml's gguf.cpp: "GGUF", u32 version 3, u64 tensor count, u64 KV count; KVs as
// (u64-length string key, u32 type, value); tensor infos as (name, u32 n_dims, u64 ne[n_dims]
// fastest first, u32 type, u64 offset); the data section at the next multiple of
// general.alignment, each offset a multiple of it.
//
// The expected floats are computed here from those formulas (an f16 decoder and the doubled
// table of our own), and the reader must give the same values: the quantized embedding and 1-D
// norms dequantized at load, the 2-D weights as codes and scales through dequantize_row.
// One difference is not a value: ggml's code 8 is +0 (the int 0 times d) and ours -0 (E2M1's
// negative zero); they compare equal, as they do in every product.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/gguf_file.h"
#include "checkpoint/safetensors.h"
#include "kernels/quant_formats.h"
#include "model/model_files.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

// ggml's type ids (ggml.h's enum ggml_type).
constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kBF16 = 30, kMXFP4 = 39;

float f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 0x400), e - 25);
  return s ? -v : v;
}
float bf16_value(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
const int8_t kValuesMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// One block's 32 values, as ggml's dequantize_row_* computes them.
std::vector<float> ggml_dequantize(uint32_t type, const uint8_t* blk) {
  std::vector<float> y(32);
  if (type == kQ8_0) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    for (int j = 0; j < 32; ++j) y[size_t(j)] = float(int8_t(blk[2 + j])) * f16_value(d);
  } else if (type == kQ4_0) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    for (int j = 0; j < 16; ++j) {
      y[size_t(j)] = float((blk[2 + j] & 0x0f) - 8) * f16_value(d);
      y[size_t(j) + 16] = float((blk[2 + j] >> 4) - 8) * f16_value(d);
    }
  } else {
    const float d = e8m0_to_fp32_half(blk[0]);
    for (int j = 0; j < 16; ++j) {
      y[size_t(j)] = float(kValuesMxfp4[blk[1 + j] & 0x0f]) * d;
      y[size_t(j) + 16] = float(kValuesMxfp4[blk[1 + j] >> 4]) * d;
    }
  }
  return y;
}

size_t block_bytes(uint32_t type) { return type == kQ8_0 ? 34 : type == kQ4_0 ? 18 : type == kMXFP4 ? 17 : 0; }

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void kv_u32(const std::string& k, uint32_t v) { str(k), put<uint32_t>(4), put<uint32_t>(v); }
  void kv_str(const std::string& k, const std::string& v) { str(k), put<uint32_t>(8), str(v); }
};

struct Tensor {
  std::string name;
  uint32_t type;
  std::vector<uint64_t> ne;  // fastest first
  std::vector<uint8_t> data;
};

// Interesting f16 scales: 1, -0.5, the smallest and largest subnormals, the largest normal,
// ~0.1, -3.14, zero and negative zero, 2^-14 (smallest normal).
const uint16_t kF16Scales[] = {0x3c00, 0xb800, 0x0001, 0x03ff, 0x7bff, 0x2e66, 0xc248, 0x0000, 0x8000, 0x0400};
// E8M0 bytes from ggml's subnormal cases to the largest finite: 0, 1, 2, 100, 126, 127, 128, 200, 253, 254.
const uint8_t kE8M0[] = {0, 1, 2, 100, 126, 127, 128, 200, 253, 254};

// rows x ne0 values of a quantized type, as ggml blocks: random codes (every nibble and byte
// value occurs), scales cycling through the lists above.
Tensor quantized(const std::string& name, uint32_t type, std::vector<uint64_t> ne, std::mt19937& rng, int& scale_i) {
  Tensor t{name, type, ne, {}};
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  for (uint64_t blk = 0; blk < n / 32; ++blk) {
    if (type == kMXFP4) {
      t.data.push_back(kE8M0[size_t(scale_i++) % std::size(kE8M0)]);
    } else {
      const uint16_t d = kF16Scales[size_t(scale_i++) % std::size(kF16Scales)];
      t.data.push_back(uint8_t(d)), t.data.push_back(uint8_t(d >> 8));
    }
    for (int i = 0; i < (type == kQ8_0 ? 32 : 16); ++i) t.data.push_back(uint8_t(rng()));
  }
  return t;
}

Tensor plain(const std::string& name, uint32_t type, std::vector<uint64_t> ne, std::mt19937& rng) {
  Tensor t{name, type, ne, {}};
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  for (uint64_t i = 0; i < n; ++i) {
    if (type == kF32) {
      const float v = std::ldexp(float(int(rng() % 2001) - 1000), int(rng() % 40) - 30);
      for (int b = 0; b < 4; ++b) t.data.push_back(uint8_t(std::bit_cast<uint32_t>(v) >> (8 * b)));
    } else {
      // Any finite pattern: subnormals, negative zero and the largest values included.
      uint16_t h;
      do h = uint16_t(rng());
      while (type == kF16 ? ((h >> 10) & 0x1f) == 31 : ((h >> 7) & 0xff) == 0xff);
      t.data.push_back(uint8_t(h)), t.data.push_back(uint8_t(h >> 8));
    }
  }
  return t;
}

// The file: llama metadata enough for the reader's config, general.alignment 64, and a name
// padded so that the data section's 64-aligned start is not its 32-aligned one (a reader that
// ignored the key would read every tensor 32 bytes early). Padding bytes are 0xAB, not zeros.
std::vector<uint8_t> build_gguf(const std::vector<Tensor>& tensors) {
  constexpr uint64_t kAlign = 64;
  for (size_t pad = 0;; ++pad) {
    Bytes h;
    h.b = {'G', 'G', 'U', 'F'};
    h.put<uint32_t>(3);
    h.put<uint64_t>(tensors.size());
    h.put<uint64_t>(9);
    h.kv_str("general.architecture", "llama");
    h.kv_str("general.name", "hand-built" + std::string(pad, '.'));
    h.kv_u32("general.alignment", uint32_t(kAlign));
    h.kv_u32("llama.block_count", 1);
    h.kv_u32("llama.embedding_length", 64);
    h.kv_u32("llama.feed_forward_length", 64);
    h.kv_u32("llama.attention.head_count", 2);
    h.kv_u32("llama.context_length", 128);
    h.kv_u32("llama.vocab_size", 6);
    uint64_t off = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor& t : tensors) {
      h.str(t.name);
      h.put<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) h.put<uint64_t>(d);
      h.put<uint32_t>(t.type);
      h.put<uint64_t>(off);
      offsets.push_back(off);
      off = (off + t.data.size() + kAlign - 1) / kAlign * kAlign + kAlign;  // and a gap of garbage
    }
    const uint64_t end32 = (h.b.size() + 31) / 32 * 32, start = (h.b.size() + kAlign - 1) / kAlign * kAlign;
    if (end32 == start) continue;
    h.b.resize(start + off, 0xab);
    for (size_t i = 0; i < tensors.size(); ++i)
      std::memcpy(h.b.data() + start + offsets[i], tensors[i].data.data(), tensors[i].data.size());
    return h.b;
  }
}

TEST(GgufGgmlFixtures, EveryTypeBuiltFromGgmlsDefinitionsReadsAsGgmlDequantizesIt) {
  std::mt19937 rng(4307);
  int si = 0;
  const std::vector<Tensor> tensors = {
      // Dequantized at load (the embedding and 1-D norms are taken as numbers).
      quantized("token_embd.weight", kQ4_0, {64, 6}, rng, si),
      quantized("blk.0.attn_norm.weight", kMXFP4, {64}, rng, si),
      quantized("blk.0.ffn_norm.weight", kQ8_0, {64}, rng, si),
      // Kept as codes and scales (checkpoint/ggml_blocks.h repacks them).
      quantized("blk.0.ffn_gate.weight", kQ8_0, {64, 5}, rng, si),
      quantized("blk.0.ffn_up.weight", kMXFP4, {64, 5}, rng, si),
      quantized("blk.0.ffn_down.weight", kQ4_0, {64, 5}, rng, si),
      // Served from the mapping as they are.
      plain("output_norm.weight", kF32, {64}, rng),
      plain("blk.0.attn_v.weight", kF16, {64, 3}, rng),
      plain("blk.0.attn_output.weight", kBF16, {64, 3}, rng),
  };
  const std::vector<uint8_t> file = build_gguf(tensors);
  const std::string path = (fs::temp_directory_path() / ("ds-ggml-fixture-" + std::to_string(::getpid()) + ".gguf")).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));

  {
    const GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.alignment(), 64u);
    ASSERT_EQ(g.tensors().size(), tensors.size());
    for (const GgufTensor& t : g.tensors()) EXPECT_EQ((t.data - g.bytes().data()) % 64, 0) << t.name;
  }

  const std::map<std::string, std::string> hf = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
      {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"},
      {"blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight"},
      {"blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"},
      {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
      {"blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"},
  };
  const WeightStore store = open_model_weights(path);
  int checked_types[64] = {};
  for (const Tensor& t : tensors) {
    SCOPED_TRACE(t.name);
    const std::string& name = hf.at(t.name);
    const TensorView& v = store.get(name);
    const int64_t k = int64_t(t.ne[0]), rows = t.ne.size() > 1 ? int64_t(t.ne[1]) : 1;
    // What ggml makes of the bytes.
    std::vector<float> want;
    if (block_bytes(t.type)) {
      for (size_t at = 0; at < t.data.size(); at += block_bytes(t.type)) {
        const std::vector<float> y = ggml_dequantize(t.type, t.data.data() + at);
        want.insert(want.end(), y.begin(), y.end());
      }
    } else {
      for (int64_t i = 0; i < k * rows; ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, t.data.data() + size_t(i) * (t.type == kF32 ? 4 : 2), t.type == kF32 ? 4 : 2);
        want.push_back(t.type == kF32 ? std::bit_cast<float>(bits) : t.type == kF16 ? f16_value(uint16_t(bits)) : bf16_value(uint16_t(bits)));
      }
    }
    // What DeltaServe makes of them: numbers, or codes + scales dequantized row by row.
    std::vector<float> got;
    const TensorView* sc = store.find(name + "_scale");
    if (sc) {
      const QuantFormat f = quant_format_of(v.dtype, sc->dtype);
      ASSERT_NE(f, QuantFormat::None);
      got.resize(size_t(k * rows));
      for (int64_t r = 0; r < rows; ++r)
        dequantize_row(f, static_cast<const uint8_t*>(v.data) + size_t(r) * quant_code_bytes(f, int(k)),
                       static_cast<const uint8_t*>(sc->data) + size_t(r) * quant_scale_bytes(f, int(k)), int(k),
                       got.data() + size_t(r * k));
    } else {
      got = v.to_f32();
    }
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (!(got[i] == want[i]) && ++bad <= 4)
        ADD_FAILURE() << "row " << i / size_t(k) << " element " << i % size_t(k) << ": read " << got[i] << ", ggml "
                      << want[i];
    EXPECT_EQ(bad, 0);
    checked_types[t.type] += 1;
  }
  for (uint32_t type : {kF32, kF16, kBF16, kQ8_0, kQ4_0, kMXFP4}) EXPECT_GT(checked_types[type], 0) << "type " << type;
  fs::remove(path);
}

}  // namespace
}  // namespace ds
