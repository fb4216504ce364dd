#include "model/weight_loader.h"

#include <cstring>
#include <optional>

#include "core/error.h"

namespace ds {

const TensorView& WeightLoader::raw(const std::string& name) const { return store.get(prefix + name); }

namespace {

bool is_code_dtype(DType t) { return t == DType::I8 || t == DType::U8; }

}  // namespace

const TensorView& WeightLoader::get(const std::string& name, std::initializer_list<int64_t> shape) const {
  const std::string full = prefix + name;
  if (!shard.split()) return store.get(full, shape);
  const TensorView& t = store.get(full);
  const std::vector<int64_t> want(shape);
  int split_dim = -1;
  bool fits = t.shape.size() == want.size();
  for (size_t d = 0; fits && d < want.size(); ++d) {
    if (want[d] == -1 || want[d] == t.shape[d]) continue;
    // A part of k (k dividing the shard count: the KV heads a dcp group shares are split over
    // tp / dcp groups of consecutive ranks).
    if (split_dim < 0 && want[d] > 0 && t.shape[d] % want[d] == 0 && shard.size % (t.shape[d] / want[d]) == 0) split_dim = int(d);
    else fits = false;
  }
  if (!fits || split_dim < 0) return store.get(full, shape);  // whole, or the store's own shape error
  // Rows (dimension 0) are contiguous: a view. Other dimensions: outer x [part of d] x inner.
  const int parts = int(t.shape[size_t(split_dim)] / want[size_t(split_dim)]);
  const int part = shard.rank / (shard.size / parts);
  TensorView v = t;
  v.shape[size_t(split_dim)] = want[size_t(split_dim)];
  v.nbytes = t.nbytes / size_t(parts);
  std::vector<std::byte> copy;
  if (split_dim == 0) {
    v.data = static_cast<const std::byte*>(t.data) + v.nbytes * size_t(part);
  } else {
    size_t outer = 1, inner = t.nbytes;
    for (int d = 0; d < split_dim; ++d) outer *= size_t(t.shape[size_t(d)]);
    inner /= outer * size_t(t.shape[size_t(split_dim)]);  // bytes per index of split_dim
    const size_t piece = size_t(want[size_t(split_dim)]) * inner, whole = size_t(t.shape[size_t(split_dim)]) * inner;
    copy.resize(v.nbytes);
    const auto* src = static_cast<const std::byte*>(t.data);
    for (size_t o = 0; o < outer; ++o) std::memcpy(copy.data() + o * piece, src + o * whole + piece * size_t(part), piece);
  }
  slices->emplace_back(std::move(v), std::move(copy));
  auto& [view, bytes] = slices->back();
  if (!bytes.empty()) view.data = bytes.data();
  return view;
}

std::optional<WeightLoader::QuantParts> WeightLoader::quantized(const std::string& name, int out, int in) const {
  const TensorView* codes = store.find(prefix + name);
  if (!codes || !is_code_dtype(codes->dtype)) return std::nullopt;
  const std::string where = "tensor '" + prefix + name + "' in " + store.dir();
  const TensorView* scales = store.find(prefix + name + "_scale");
  DS_CHECK(scales, where + " holds quantized codes (" + std::string(dtype_name(codes->dtype)) + ") but '" + prefix +
                       name + "_scale' is missing");
  const QuantFormat f = quant_format_of(codes->dtype, scales->dtype);
  DS_CHECK(f != QuantFormat::None, where + ": codes " + std::string(dtype_name(codes->dtype)) + " with scales " +
                                       std::string(dtype_name(scales->dtype)) +
                                       " name no format (q8_0: I8 + F16, q4_0: U8 + F16, mxfp4: U8 + U8)");
  DS_CHECK(in % kQuantBlock == 0, where + ": a " + std::string(quant_format_name(f)) + " weight needs its input size (" +
                                      std::to_string(in) + ") to be a multiple of 32");
  const int64_t scale_cols = in / kQuantBlock;
  return QuantParts{f, &get(name, {int64_t(out), int64_t(quant_code_bytes(f, in))}), &get(name + "_scale", {int64_t(out), scale_cols})};
}

PackedWeight WeightLoader::linear(const std::string& name, int out, int in) const {
  if (auto q = quantized(name, out, in)) {
    // Mapped tensors may be unaligned; the packer reads bytes, which is fine.
    return pack_quantized_weight(q->format, static_cast<const uint8_t*>(q->codes->data),
                                 static_cast<const uint8_t*>(q->scales->data), out, in);
  }
  const TensorView& t = get(name, {int64_t(out), int64_t(in)});
  // Mapped tensors may be unaligned (safetensors packs them back to back): copy first.
  std::vector<std::byte> aligned(t.nbytes);
  std::memcpy(aligned.data(), t.data, t.nbytes);
  return pack_weight(aligned.data(), t.dtype, out, in);
}

PackedWeight WeightLoader::stacked(const std::vector<std::pair<std::string, int>>& names_out, int in) const {
  // Consecutive parts of one kind (the same quantized format, or unquantized) pack together;
  // a stack of several kinds (a KDA projection whose small gate parts stay bf16 beside
  // quantized q, k, v) becomes a PackedWeight of parts, one matmul each.
  std::vector<PackedWeight> runs;
  size_t i = 0;
  while (i < names_out.size()) {
    const std::optional<QuantParts> first = quantized(names_out[i].first, names_out[i].second, in);
    const QuantFormat f = first ? first->format : QuantFormat::None;
    size_t j = i;
    std::vector<QuantParts> qparts;
    while (j < names_out.size()) {
      const std::optional<QuantParts> q = quantized(names_out[j].first, names_out[j].second, in);
      if ((q ? q->format : QuantFormat::None) != f) break;
      if (q) qparts.push_back(*q);
      ++j;
    }
    int rows = 0;
    for (size_t t = i; t < j; ++t) rows += names_out[t].second;
    if (f != QuantFormat::None) {
      // Blocks run along k, so rows are independent: the stack is the rows one after another.
      std::vector<uint8_t> codes, scales;
      for (const QuantParts& q : qparts) {
        const auto* c = static_cast<const uint8_t*>(q.codes->data);
        const auto* s = static_cast<const uint8_t*>(q.scales->data);
        codes.insert(codes.end(), c, c + q.codes->nbytes);
        scales.insert(scales.end(), s, s + q.scales->nbytes);
      }
      runs.push_back(pack_quantized_weight(f, codes.data(), scales.data(), rows, in));
    } else {
      runs.push_back(stacked_unquantized({names_out.begin() + long(i), names_out.begin() + long(j)}, rows, in));
    }
    i = j;
  }
  return stack_weights(std::move(runs));
}

PackedWeight WeightLoader::stacked_unquantized(const std::vector<std::pair<std::string, int>>& names_out, int total,
                                               int in) const {
  std::vector<float> all(size_t(total) * size_t(in));
  DType dtype = DType::BF16;
  size_t row = 0;
  for (auto& [name, out] : names_out) {
    const TensorView& t = float_tensor(name, {int64_t(out), int64_t(in)});
    if (t.dtype != DType::BF16) dtype = DType::F32;  // any wider part keeps the whole stack exact
    t.copy_as_f32(all.data() + row * size_t(in));
    row += size_t(out);
  }
  if (dtype == DType::F32) return pack_weight(all.data(), DType::F32, total, in);
  std::vector<uint16_t> b(all.size());
  for (size_t i = 0; i < all.size(); ++i) b[i] = f32_to_bf16(all[i]);  // exact: values came from bf16
  return pack_weight(b.data(), DType::BF16, total, in);
}

void WeightLoader::require_numbers(const TensorView& t) const {
  DS_CHECK(!is_code_dtype(t.dtype), "tensor '" + t.name + "' in " + store.dir() + " is " + std::string(dtype_name(t.dtype)) +
                                        ", but only a linear layer's weight may be quantized; this one must be F32, BF16 or F16");
}

const TensorView& WeightLoader::float_tensor(const std::string& name, std::initializer_list<int64_t> shape) const {
  const TensorView& t = get(name, shape);
  require_numbers(t);
  return t;
}

std::vector<float> WeightLoader::vector_f32(const std::string& name, int64_t numel) const {
  const TensorView* whole = &store.get(prefix + name);
  // A split shard's share of a per-channel vector: numel * shard.size stored, along its one
  // dimension longer than 1 (A_log is kept as [1, 1, heads, 1]).
  const TensorView* t = whole;
  if (shard.split() && whole->numel() == numel * shard.size) {
    int long_dims = 0;
    for (int64_t d : whole->shape) long_dims += d > 1;
    if (long_dims == 1) {
      std::vector<int64_t> s = whole->shape;
      for (int64_t& d : s)
        if (d > 1) d /= shard.size;
      if (s.size() == 1) t = &get(name, {s[0]});
      else if (s.size() == 2) t = &get(name, {s[0], s[1]});
      else if (s.size() == 3) t = &get(name, {s[0], s[1], s[2]});
      else if (s.size() == 4) t = &get(name, {s[0], s[1], s[2], s[3]});
    }
  }
  require_numbers(*t);
  DS_CHECK(t->numel() == numel, "tensor '" + prefix + name + "' in " + store.dir() + " has " +
                                    std::to_string(t->numel()) + " elements, expected " + std::to_string(numel));
  return t->to_f32();
}

}  // namespace ds
