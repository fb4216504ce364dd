// Loading helpers shared by the layers: shape-checked, copied into aligned packed memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "kernels/matmul.h"
#include "model/shard.h"

namespace ds {

// Under a split shard, a layer asks for its local shape and the loader hands over this rank's
// slice: a requested size that is the stored one divided by k, in exactly one dimension, with k
// dividing shard.size, takes part shard.rank / (shard.size / k) of that dimension: k = size for
// what tp splits, fewer for what consecutive ranks share (a dcp group's KV heads). Rows: a view
// into the mapped file; any other dimension: a copy the loader keeps until it is destroyed.
// Every other size must match.
struct WeightLoader {
  const WeightStore& store;
  std::string prefix;  // e.g. "model.layers.3."
  TensorShard shard = {};
  std::shared_ptr<std::deque<std::pair<TensorView, std::vector<std::byte>>>> slices =
      std::make_shared<std::deque<std::pair<TensorView, std::vector<std::byte>>>>();

  // store.get(prefix + name, shape), or this rank's slice of it (above).
  const TensorView& get(const std::string& name, std::initializer_list<int64_t> shape) const;

  PackedWeight linear(const std::string& name, int out, int in) const;
  // Several [out_i, in] linears of the same input stacked into one matmul.
  PackedWeight stacked(const std::vector<std::pair<std::string, int>>& names_out, int in) const;
  std::vector<float> vector_f32(const std::string& name, int64_t numel) const;
  const TensorView& raw(const std::string& name) const;
  // A tensor that must hold numbers, not quantized codes (norms, biases, embeddings): a clear
  // error for I8 / U8. -1 in the shape matches any size.
  const TensorView& float_tensor(const std::string& name, std::initializer_list<int64_t> shape) const;
  void require_numbers(const TensorView& t) const;
  PackedWeight stacked_unquantized(const std::vector<std::pair<std::string, int>>& names_out, int total, int in) const;

  // A quantized linear's codes and scales (kernels/quant_formats.h), shape-checked; nothing when
  // `name` is not quantized.
  struct QuantParts {
    QuantFormat format;
    const TensorView* codes;
    const TensorView* scales;
  };
  std::optional<QuantParts> quantized(const std::string& name, int out, int in) const;
};

}  // namespace ds
