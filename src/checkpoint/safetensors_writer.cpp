#include "checkpoint/safetensors_writer.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "checkpoint/atomic_file.h"
#include "core/error.h"

namespace ds {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

uint64_t checked_bytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    DS_CHECK(d >= 0, "safetensors writer: tensor '" + name + "' has a negative dimension");
    DS_CHECK(!__builtin_mul_overflow(numel, uint64_t(d), &numel),
             "safetensors writer: tensor '" + name + "' element count overflows");
  }
  uint64_t bytes = 0;
  DS_CHECK(numel <= uint64_t(std::numeric_limits<int64_t>::max()) &&
               !__builtin_mul_overflow(numel, uint64_t(dtype_size(dtype)), &bytes),
           "safetensors writer: tensor '" + name + "' byte size overflows");
  return bytes;
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::span<const std::byte> data) {
  DS_CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is reserved");
  DS_CHECK(!tensors_.count(name), "safetensors writer: tensor '" + name + "' added twice");
  const uint64_t bytes = checked_bytes(name, dtype, shape);
  DS_CHECK(bytes == data.size(), "safetensors writer: tensor '" + name + "' " +
                                     std::string(dtype_name(dtype)) + " shape needs " +
                                     std::to_string(bytes) + " bytes, got " +
                                     std::to_string(data.size()));
  tensors_.emplace(std::move(name),
                   Entry{dtype, std::move(shape), std::vector<std::byte>(data.begin(), data.end())});
}

void SafetensorsWriter::add_f32_as(std::string name, DType target, std::vector<int64_t> shape,
                                   std::span<const float> values) {
  std::vector<std::byte> bytes(values.size() * dtype_size(target));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (target) {
      case DType::F32: std::memcpy(&bytes[i * 4], &values[i], 4); break;
      case DType::BF16: {
        uint16_t h = f32_to_bf16(values[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case DType::F16: {
        uint16_t h = f32_to_f16(values[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case DType::I8: bytes[i] = std::byte(uint8_t(int8_t(values[i]))); break;
      case DType::U8: bytes[i] = std::byte(uint8_t(values[i])); break;
    }
  }
  add(std::move(name), target, std::move(shape), bytes);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::string SafetensorsWriter::header() const {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, e] : tensors_) {
    h[name] = {{"dtype", std::string(dtype_name(e.dtype))},
               {"shape", e.shape},
               {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

std::vector<std::byte> SafetensorsWriter::to_bytes() const {
  const std::string h = header();
  size_t total = 8 + h.size();
  for (const auto& [name, e] : tensors_) total += e.data.size();
  std::vector<std::byte> out;
  out.reserve(total);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((n >> (8 * i)) & 0xff));
  for (char c : h) out.push_back(std::byte(c));
  for (const auto& [name, e] : tensors_) out.insert(out.end(), e.data.begin(), e.data.end());
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  write_file_atomically(path, [&](int fd, const std::string& tmp) {
    const std::string h = header();
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t((uint64_t(h.size()) >> (8 * i)) & 0xff);
    write_all(fd, len, 8, tmp);
    write_all(fd, h.data(), h.size(), tmp);
    for (const auto& [name, e] : tensors_) write_all(fd, e.data.data(), e.data.size(), tmp);
  });
}

}  // namespace ds
