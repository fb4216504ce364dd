#include "convert/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/ggml_blocks.h"
#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_tokenizer.h"
#include "checkpoint/gguf_writer.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "kernels/quant_formats.h"
#include "model/config.h"
#include "model/gguf_arch.h"
#include "model/gguf_names.h"
#include "model/gguf_transforms.h"
#include "model/model_files.h"

namespace ds {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  DS_CHECK(f, "cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint32_t ggml_of_dtype(DType d) {
  switch (d) {
    case DType::F32: return uint32_t(GgmlType::F32);
    case DType::F16: return uint32_t(GgmlType::F16);
    case DType::BF16: return uint32_t(GgmlType::BF16);
    default: break;
  }
  throw Error("GGUF: dtype " + std::string(dtype_name(d)) + " has no ggml type");
}

}  // namespace

GgufExportReport export_gguf(const std::string& model_dir, const std::string& out_path) {
  const fs::path dir(model_dir);
  const std::string cfg_text = read_text(dir / "config.json");
  const ModelConfig cfg = parse_model_config(cfg_text, (dir / "config.json").string());
  GgufWriter w;
  GgufExportReport rep;
  rep.architecture =
      gguf_write_arch_metadata(cfg, parse_json(cfg_text, (dir / "config.json").string()), dir.filename().string(), w);
  const std::string& arch = rep.architecture;

  const fs::path tok = dir / "tokenizer.json";
  if (fs::exists(tok)) {
    write_gguf_tokenizer(read_text(tok), tok.string(), cfg.vocab_size, w);
    if (cfg.bos_token_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(cfg.bos_token_id));
    if (!cfg.eos_token_ids.empty()) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(cfg.eos_token_ids[0]));
    // A second end token (ChatML's <|im_end|>) is llama.cpp's end of turn.
    if (cfg.eos_token_ids.size() > 1) w.set_u32("tokenizer.ggml.eot_token_id", uint32_t(cfg.eos_token_ids[1]));
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    if (const std::string t = model_chat_template_text(model_dir); !t.empty()) w.set_string("tokenizer.chat_template", t);
  }

  const WeightStore store = open_model_weights(model_dir);
  struct Stack {
    uint32_t type = 0;
    std::vector<int64_t> dims;  // one expert's
    std::map<int, std::vector<std::byte>> experts;
  };
  std::map<std::string, Stack> stacks;
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    const bool codes = t.dtype == DType::I8 || t.dtype == DType::U8;
    if (name.ends_with("_scale"))
      if (const TensorView* base = store.find(name.substr(0, name.size() - 6)); base && (base->dtype == DType::I8 || base->dtype == DType::U8))
        continue;  // written with its codes
    const std::optional<GgufName> m = gguf_name_of_hf(arch, name);
    DS_CHECK(m, "to GGUF: tensor '" + name + "' of " + model_dir + " has no " + arch + " GGUF name");
    DS_CHECK(!t.shape.empty() && t.shape.size() <= 4, "to GGUF: tensor '" + name + "' must have 1 to 4 dimensions");
    DS_CHECK(!codes || t.shape.size() == 2, "to GGUF: quantized tensor '" + name + "' must be 2-D");
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
    if (m->transform == GgufTransform::KvBKeys) {
      DS_CHECK(!codes, "to GGUF: '" + name + "' is quantized, but llama.cpp splits kv_b_proj into attn_k_b and attn_v_b, "
                       "which only a float tensor can be (quantize keeps it unless --keep says otherwise)");
      const int64_t H = cfg.mla.num_heads, nope = cfg.mla.qk_nope_head_dim, L = cfg.mla.kv_lora_rank, V = cfg.mla.v_head_dim;
      DS_CHECK(t.shape == std::vector<int64_t>({H * (nope + V), L}), "to GGUF: '" + name + "' is not [heads * (nope + v), kv_lora_rank]");
      const size_t es = dtype_size(t.dtype);
      std::vector<std::byte> k_b(size_t(H * L * nope) * es), v_b(size_t(H * V * L) * es);
      gguf_split_kv_b(static_cast<const std::byte*>(t.data), H, nope, V, L, es, k_b.data(), v_b.data());
      std::string vb = m->name;  // attn_k_b's name, then attn_v_b's
      vb.replace(vb.find("attn_k_b"), 8, "attn_v_b");
      w.add_tensor(m->name, ggml_of_dtype(t.dtype), {nope, L, H}, k_b);
      w.add_tensor(vb, ggml_of_dtype(t.dtype), {L, V, H}, v_b);
      rep.bytes += k_b.size() + v_b.size();
      rep.tensors += 2;
      continue;
    }
    std::vector<std::byte> bytes;
    uint32_t type;
    int64_t k = t.shape.back();
    if (codes) {
      const TensorView& s = store.get(name + "_scale");
      const QuantFormat f = quant_format_of(t.dtype, s.dtype);
      DS_CHECK(f != QuantFormat::None, "to GGUF: tensor '" + name + "' has codes and scales of no known format");
      k = s.shape.back() * kQuantBlock;
      type = ggml_type_of(f);
      int be = 0, bb = 0;
      ggml_type_layout(type, &be, &bb);
      bytes.resize(size_t(rows) * size_t(k / be) * size_t(bb));
      std::vector<uint8_t> c(t.nbytes), sc(s.nbytes);
      std::memcpy(c.data(), t.data, t.nbytes);
      std::memcpy(sc.data(), s.data, s.nbytes);
      codes_to_ggml_blocks(f, c.data(), sc.data(), rows, int(k), bytes.data());
    } else if (m->transform == GgufTransform::DecayRate) {
      // ssm_a holds -exp(A_log), computed as model/kda_mixer.cpp does at load.
      type = uint32_t(GgmlType::F32);
      bytes.resize(size_t(t.numel()) * 4);
      auto* a = reinterpret_cast<float*>(bytes.data());
      t.copy_as_f32(a);
      for (int64_t i = 0; i < t.numel(); ++i) a[i] = -std::exp(a[i]);
    } else if ((t.shape.size() == 1 || m->transform == GgufTransform::Conv1d) && t.dtype != DType::F32) {
      // llama.cpp multiplies by norm weights, adds biases and convolves only in f32, as its own
      // converter writes them; widening bf16 / f16 is exact, so both engines read the same numbers.
      type = uint32_t(GgmlType::F32);
      bytes.resize(size_t(t.numel()) * 4);
      t.copy_as_f32(reinterpret_cast<float*>(bytes.data()));
    } else {
      type = ggml_of_dtype(t.dtype);
      bytes.resize(t.nbytes);
      std::memcpy(bytes.data(), t.data, t.nbytes);
    }
    if (m->transform == GgufTransform::PermuteQ || m->transform == GgufTransform::PermuteK)
      bytes = gguf_permute_rows(bytes.data(), rows, bytes.size() / size_t(rows), gguf_permuted_heads(m->transform, cfg), true, "to GGUF: '" + name + "'");
    // ggml lists dims fastest-varying first: the Hugging Face shape reversed (codes: the row's values).
    std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
    dims[0] = k;
    if (m->transform == GgufTransform::Experts) {
      Stack& st = stacks[m->name];
      DS_CHECK(st.experts.empty() || (st.type == type && st.dims == dims),
               "to GGUF: the experts of '" + m->name + "' differ in format or shape ('" + name + "')");
      st.type = type;
      st.dims = dims;
      st.experts[m->expert] = std::move(bytes);
      continue;
    }
    rep.bytes += bytes.size();
    w.add_tensor(m->name, type, dims, bytes);
    ++rep.tensors;
  }
  for (auto& [name, st] : stacks) {
    std::vector<std::byte> all;
    int next = 0;
    for (auto& [e, bytes] : st.experts) {
      DS_CHECK(e == next++, "to GGUF: expert " + std::to_string(next - 1) + " of '" + name + "' is missing");
      all.insert(all.end(), bytes.begin(), bytes.end());
    }
    std::vector<int64_t> dims = st.dims;
    dims.push_back(int64_t(st.experts.size()));
    rep.bytes += all.size();
    w.add_tensor(name, st.type, dims, all);
    ++rep.tensors;
  }
  w.write(out_path);
  return rep;
}

}  // namespace ds
