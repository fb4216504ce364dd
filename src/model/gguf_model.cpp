#include "model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "checkpoint/ggml_blocks.h"
#include "checkpoint/gguf_file.h"
#include "core/error.h"
#include "kernels/quant_formats.h"
#include "model/config.h"
#include "model/gguf_arch.h"
#include "model/gguf_names.h"
#include "model/gguf_transforms.h"
#include "model/unquantized_tensors.h"

namespace ds {

namespace {

bool float_ggml(uint32_t t, DType* d) {
  switch (GgmlType(t)) {
    case GgmlType::F32: *d = DType::F32; return true;
    case GgmlType::F16: *d = DType::F16; return true;
    case GgmlType::BF16: *d = DType::BF16; return true;
    default: return false;
  }
}

// What stays in float (model/unquantized_tensors.h): the tensors `deltaserve quantize` keeps
// (embeddings, norms, router, ...). A GGUF that quantized one gets it dequantized at load.
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
        p = gguf_permute_rows(t.data, t.rows(), t.nbytes / size_t(t.rows()), gguf_permuted_heads(m->transform, cfg), false, where);
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
    gguf_join_kv_b(k.data, v.data, H, nope, V, L, k.nbytes / size_t(k.numel()), out.data());
    sb.add(name, k.type, {L, H * (nope + V)}, out.data(), out.size());
  }
  std::vector<std::span<const std::byte>> content = {g.bytes()};
  return WeightStore::from_views("GGUF " + path, std::move(views), b, std::move(content));
}

}  // namespace ds
