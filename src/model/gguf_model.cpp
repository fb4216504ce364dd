#include "model/gguf_model.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "kernels/quant_formats.h"
#include "model/config.h"
#include "model/ggml_blocks.h"
#include "model/gguf_arch.h"
#include "model/gguf_file.h"
#include "model/gguf_names.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_writer.h"
#include "model/model_files.h"
#include "model/quantize.h"

namespace ds {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  DS_CHECK(f, "cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Rows of a q or k projection between llama.cpp's interleaved order and Hugging Face's halves
// (GgufTransform::PermuteQ / PermuteK): within head h of d rows, Hugging Face row h*d + s*d/2 + i
// is GGUF row h*d + 2i + s.
std::vector<std::byte> permute_rows(const std::byte* src, int64_t rows, size_t row_bytes, int heads, bool to_gguf,
                                    const std::string& where) {
  DS_CHECK(heads > 0 && rows % (2 * int64_t(heads)) == 0,
           where + ": " + std::to_string(rows) + " rows cannot be " + std::to_string(heads) + " heads of an even size");
  std::vector<std::byte> out(size_t(rows) * row_bytes);
  const int64_t d = rows / heads;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t hf = h * d + s * (d / 2) + i, gg = h * d + 2 * i + s;
        const int64_t from = to_gguf ? hf : gg, to = to_gguf ? gg : hf;
        std::memcpy(out.data() + size_t(to) * row_bytes, src + size_t(from) * row_bytes, row_bytes);
      }
  return out;
}

// kv_b_proj [H][nope + V][L] (rows of L values) <-> llama.cpp's attn_k_b [H][L][nope] (each
// head's key rows transposed) and attn_v_b [H][V][L]; es: bytes per element.
void join_kv_b(const std::byte* k_b, const std::byte* v_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es,
               std::byte* kv_b) {
  for (int64_t h = 0; h < H; ++h) {
    std::byte* head = kv_b + size_t(h * (nope + V) * L) * es;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < L; ++j)
        std::memcpy(head + size_t(i * L + j) * es, k_b + size_t((h * L + j) * nope + i) * es, es);
    std::memcpy(head + size_t(nope * L) * es, v_b + size_t(h * V * L) * es, size_t(V * L) * es);
  }
}
void split_kv_b(const std::byte* kv_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es, std::byte* k_b,
                std::byte* v_b) {
  for (int64_t h = 0; h < H; ++h) {
    const std::byte* head = kv_b + size_t(h * (nope + V) * L) * es;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < L; ++j)
        std::memcpy(k_b + size_t((h * L + j) * nope + i) * es, head + size_t(i * L + j) * es, es);
    std::memcpy(v_b + size_t(h * V * L) * es, head + size_t(nope * L) * es, size_t(V * L) * es);
  }
}

int heads_for(GgufTransform t, const ModelConfig& c) {
  return t == GgufTransform::PermuteQ ? c.gqa.num_heads : c.gqa.num_kv_heads;
}

bool float_ggml(uint32_t t, DType* d) {
  switch (GgmlType(t)) {
    case GgmlType::F32: *d = DType::F32; return true;
    case GgmlType::F16: *d = DType::F16; return true;
    case GgmlType::BF16: *d = DType::BF16; return true;
    default: return false;
  }
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

// What the layers take only as numbers: the tensors `deltaserve quantize` keeps (embeddings,
// norms, router, ...). A GGUF that quantized one gets it dequantized at load.
bool needs_numbers(const std::string& hf_name) {
  for (const std::string& frag : kQuantizeKeptByDefault)
    if (hf_name.find(frag) != std::string::npos) return true;
  return false;
}

struct Backing {
  GgufFile file;
  std::deque<std::vector<std::byte>> buffers;  // repacked tensors (a deque: own() hands out references that must stay valid)
};

class StoreBuilder {
 public:
  StoreBuilder(Backing& b, std::vector<TensorView>& views) : b_(b), views_(views) {}

  // One tensor of ggml type `type` and ggml dims, under the Hugging Face name.
  void add(const std::string& name, uint32_t type, const std::vector<int64_t>& dims, const std::byte* data, size_t nbytes) {
    std::vector<int64_t> shape(dims.rbegin(), dims.rend());
    DType dt;
    if (float_ggml(type, &dt)) {
      views_.push_back(TensorView{name, dt, shape, data, nbytes});
      return;
    }
    const QuantFormat f = quant_format_of_ggml(type);
    const int k = int(dims[0]);
    const int64_t rows = nbytes / (size_t(k / kQuantBlock) * (f == QuantFormat::Q8_0 ? 34 : f == QuantFormat::Q4_0 ? 18 : 17));
    std::vector<uint8_t> codes(size_t(rows) * quant_code_bytes(f, k)), scales(size_t(rows) * quant_scale_bytes(f, k));
    ggml_blocks_to_codes(f, data, rows, k, codes.data(), scales.data());
    if (dims.size() == 1 || needs_numbers(name)) {
      std::vector<std::byte>& out = own(size_t(rows) * size_t(k) * 4);
      for (int64_t r = 0; r < rows; ++r)
        dequantize_row(f, codes.data() + size_t(r) * quant_code_bytes(f, k), scales.data() + size_t(r) * quant_scale_bytes(f, k), k,
                       reinterpret_cast<float*>(out.data()) + size_t(r) * size_t(k));
      views_.push_back(TensorView{name, DType::F32, shape, out.data(), out.size()});
      return;
    }
    DS_CHECK(dims.size() == 2, "GGUF " + b_.file.path() + ": quantized tensor for '" + name + "' must be 2-D");
    std::vector<std::byte>& c = own(codes.size());
    std::memcpy(c.data(), codes.data(), codes.size());
    std::vector<std::byte>& s = own(scales.size());
    std::memcpy(s.data(), scales.data(), scales.size());
    views_.push_back(TensorView{name, quant_code_dtype(f), {rows, int64_t(quant_code_bytes(f, k))}, c.data(), c.size()});
    views_.push_back(TensorView{name + "_scale", quant_scale_dtype(f), {rows, int64_t(k / kQuantBlock)}, s.data(), s.size()});
  }

  std::vector<std::byte>& own(size_t n) {
    b_.buffers.emplace_back(n);
    return b_.buffers.back();
  }

 private:
  Backing& b_;
  std::vector<TensorView>& views_;
};

}  // namespace

std::string gguf_config_json(const GgufFile& g) { return gguf_arch_config(g).dump(2); }

std::string gguf_chat_template(const GgufFile& g) {
  const GgufValue* v = g.find("tokenizer.chat_template");
  return v && v->type == GgufValueType::String ? v->s : std::string();
}

WeightStore gguf_weight_store(const std::string& path) {
  auto b = std::make_shared<Backing>(Backing{GgufFile::open(path, true), {}});
  const GgufFile& g = b->file;
  const std::string arch = gguf_architecture(g);
  const ModelConfig cfg = parse_model_config(gguf_config_json(g), "GGUF " + path);
  std::vector<TensorView> views;
  StoreBuilder sb(*b, views);
  struct KvBHalves {
    const GgufTensor* keys = nullptr;
    const GgufTensor* values = nullptr;
  };
  std::map<std::string, KvBHalves> kv_b;
  for (const GgufTensor& t : g.tensors()) {
    const std::string where = "GGUF " + path + ": tensor '" + t.name + "'";
    const std::optional<GgufName> m = hf_name_of_gguf(arch, t.name);
    DS_CHECK(m, where + " is not a tensor of a " + arch + " model that DeltaServe loads");
    int be = 0, bb = 0;
    DS_CHECK(ggml_type_layout(t.type, &be, &bb),
             where + " is " + ggml_type_name(t.type) + ", which DeltaServe does not read (F32, F16, BF16, Q8_0, Q4_0 and MXFP4 are read)");
    switch (m->transform) {
      case GgufTransform::None:
        sb.add(m->name, t.type, t.dims, t.data, t.nbytes);
        break;
      case GgufTransform::PermuteQ:
      case GgufTransform::PermuteK: {
        DS_CHECK(t.dims.size() == 2, where + " must be 2-D");
        std::vector<std::byte>& p = sb.own(0);
        p = permute_rows(t.data, t.rows(), t.nbytes / size_t(t.rows()), heads_for(m->transform, cfg), false, where);
        sb.add(m->name, t.type, t.dims, p.data(), p.size());
        break;
      }
      case GgufTransform::Conv1d: {
        DType dt;
        DS_CHECK(float_ggml(t.type, &dt), where + " must be F32, F16 or BF16");
        const int64_t K = t.dims[0], C = t.numel() / std::max<int64_t>(K, 1);
        DS_CHECK(t.dims.size() >= 3 && t.dims[1] == 1 && (t.dims.size() == 3 || t.dims[3] == 1),
                 where + " must be {K, 1, C} or {K, 1, C, 1}");
        sb.add(m->name, t.type, {K, 1, C}, t.data, t.nbytes);
        break;
      }
      case GgufTransform::DecayRate: {
        DType dt;
        DS_CHECK(float_ggml(t.type, &dt), where + " must be F32, F16 or BF16");
        std::string name = m->name;
        name.replace(name.rfind("A_log"), 5, "A");  // the rate itself, not its log (model/kda_mixer.cpp)
        sb.add(name, t.type, {t.numel()}, t.data, t.nbytes);
        break;
      }
      case GgufTransform::KvBKeys:
      case GgufTransform::KvBValues: {
        DType dt;
        DS_CHECK(float_ggml(t.type, &dt), where + " must be F32, F16 or BF16 (it is one half of kv_b_proj)");
        KvBHalves& kv = kv_b[m->name];
        (m->transform == GgufTransform::KvBKeys ? kv.keys : kv.values) = &t;
        break;
      }
      case GgufTransform::Experts: {
        DS_CHECK(t.dims.size() == 3, where + " must be 3-D (one matrix per expert)");
        const int64_t E = t.dims[2];
        const size_t per = t.nbytes / size_t(E);
        for (int64_t e = 0; e < E; ++e) {
          std::string name = m->name;
          name.replace(name.find("{E}"), 3, std::to_string(e));
          sb.add(name, t.type, {t.dims[0], t.dims[1]}, t.data + size_t(e) * per, per);
        }
        break;
      }
    }
  }
  for (const auto& [name, halves] : kv_b) {
    const std::string where = "GGUF " + path + ": " + name + " (attn_k_b and attn_v_b)";
    DS_CHECK(halves.keys && halves.values, where + ": one of the two halves is missing");
    const GgufTensor &k = *halves.keys, &v = *halves.values;
    const int64_t H = cfg.mla.num_heads, nope = cfg.mla.qk_nope_head_dim, L = cfg.mla.kv_lora_rank, V = cfg.mla.v_head_dim;
    DS_CHECK(k.type == v.type, where + " must be of one type");
    DS_CHECK(k.dims == std::vector<int64_t>({nope, L, H}), where + ": attn_k_b must be {" + std::to_string(nope) + ", " +
                                                                 std::to_string(L) + ", " + std::to_string(H) + "}");
    DS_CHECK(v.dims == std::vector<int64_t>({L, V, H}), where + ": attn_v_b must be {" + std::to_string(L) + ", " +
                                                              std::to_string(V) + ", " + std::to_string(H) + "}");
    std::vector<std::byte>& out = sb.own(k.nbytes + v.nbytes);
    join_kv_b(k.data, v.data, H, nope, V, L, k.nbytes / size_t(k.numel()), out.data());
    sb.add(name, k.type, {L, H * (nope + V)}, out.data(), out.size());
  }
  std::vector<std::span<const std::byte>> content = {g.bytes()};
  return WeightStore::from_views("GGUF " + path, std::move(views), b, std::move(content));
}

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

  const WeightStore store = WeightStore::open(model_dir);
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
      split_kv_b(static_cast<const std::byte*>(t.data), H, nope, V, L, es, k_b.data(), v_b.data());
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
      bytes = permute_rows(bytes.data(), rows, bytes.size() / size_t(rows), heads_for(m->transform, cfg), true, "to GGUF: '" + name + "'");
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
