// Loading helpers shared by the layers: shape-checked, copied into aligned packed memory.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/matmul.h"
#include "model/safetensors.h"

namespace ds {

struct WeightLoader {
  const WeightStore& store;
  std::string prefix;  // e.g. "model.layers.3."

  PackedWeight linear(const std::string& name, int out, int in) const;
  // Several [out_i, in] linears of the same input stacked into one matmul.
  PackedWeight stacked(const std::vector<std::pair<std::string, int>>& names_out, int in) const;
  std::vector<float> vector_f32(const std::string& name, int64_t numel) const;
  const TensorView& raw(const std::string& name) const;
};

}  // namespace ds
