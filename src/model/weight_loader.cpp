#include "model/weight_loader.h"

#include <cstring>

#include "core/error.h"

namespace ds {

const TensorView& WeightLoader::raw(const std::string& name) const { return store.get(prefix + name); }

PackedWeight WeightLoader::linear(const std::string& name, int out, int in) const {
  const TensorView& t = store.get(prefix + name, {int64_t(out), int64_t(in)});
  // Mapped tensors may be unaligned (safetensors packs them back to back): copy first.
  std::vector<std::byte> aligned(t.nbytes);
  std::memcpy(aligned.data(), t.data, t.nbytes);
  return pack_weight(aligned.data(), t.dtype, out, in);
}

PackedWeight WeightLoader::stacked(const std::vector<std::pair<std::string, int>>& names_out, int in) const {
  int total = 0;
  for (auto& [name, out] : names_out) total += out;
  std::vector<float> all(size_t(total) * size_t(in));
  DType dtype = DType::BF16;
  size_t row = 0;
  for (auto& [name, out] : names_out) {
    const TensorView& t = store.get(prefix + name, {int64_t(out), int64_t(in)});
    if (t.dtype != DType::BF16) dtype = DType::F32;  // any wider part keeps the whole stack exact
    t.copy_as_f32(all.data() + row * size_t(in));
    row += size_t(out);
  }
  if (dtype == DType::F32) return pack_weight(all.data(), DType::F32, total, in);
  std::vector<uint16_t> b(all.size());
  for (size_t i = 0; i < all.size(); ++i) b[i] = f32_to_bf16(all[i]);  // exact: values came from bf16
  return pack_weight(b.data(), DType::BF16, total, in);
}

std::vector<float> WeightLoader::vector_f32(const std::string& name, int64_t numel) const {
  const TensorView& t = store.get(prefix + name);
  DS_CHECK(t.numel() == numel, "tensor '" + prefix + name + "' in " + store.dir() + " has " +
                                   std::to_string(t.numel()) + " elements, expected " + std::to_string(numel));
  return t.to_f32();
}

}  // namespace ds
