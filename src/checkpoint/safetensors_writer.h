// Writing safetensors files: used by the model maker, tools and tests. The output follows the
// format exactly (sorted names, contiguous data) so any reader, not just ours, can load it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ds {

class SafetensorsWriter {
 public:
  // Copies `data` (little-endian, numel(shape) * dtype_size bytes). Throws ds::Error on a
  // duplicate or reserved name, a negative dimension, a size overflow or a byte count mismatch.
  void add(std::string name, DType dtype, std::vector<int64_t> shape,
           std::span<const std::byte> data);
  // Converts f32 values to `target` (round to nearest even for BF16 / F16) and adds them.
  void add_f32_as(std::string name, DType target, std::vector<int64_t> shape,
                  std::span<const float> values);
  void set_metadata(std::string key, std::string value);

  size_t size() const { return tensors_.size(); }

  // The JSON header, space-padded to a multiple of 8 bytes so the data section (and every
  // tensor whose offset is a multiple of 8) starts 8-byte aligned in the file.
  std::string header() const;
  // The whole file in memory: length, header, tensors in name order, back to back.
  std::vector<std::byte> to_bytes() const;
  // Writes to a temporary file in the same directory, fsyncs and renames it over `path`, so a
  // reader (which may have the old file mapped) never sees a half-written file. Throws ds::Error
  // naming the path.
  void write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::map<std::string, Entry> tensors_;  // sorted by name: the order data is laid out in
  std::map<std::string, std::string> metadata_;
};

}  // namespace ds
