// Writing GGUF v3 files (checkpoint/gguf_file.h gives the layout): the project's converter and the
// tests use it. Metadata is written in the order it was set, tensors in the order they were
// added, each padded to the alignment, so llama.cpp's reader and ours both take the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/gguf_file.h"

namespace ds {

class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_bools(const std::string& key, const std::vector<bool>& v);
  // Raw bytes of one value (type id, then the encoding), for tests that write odd files.
  void set_raw(const std::string& key, uint32_t type, std::span<const std::byte> encoded);

  // dims fastest-varying first (ggml order); data must be the type's exact size. Throws
  // ds::Error for a duplicate name, a type this writer cannot size, or a size mismatch.
  void add_tensor(const std::string& name, uint32_t ggml_type, std::vector<int64_t> dims, std::span<const std::byte> data);

  uint32_t alignment() const { return alignment_; }
  std::vector<std::byte> to_bytes() const;
  void write(const std::string& path) const;  // atomically (checkpoint/atomic_file.h)

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> dims;
    std::vector<std::byte> data;
  };
  void put_kv(const std::string& key, uint32_t type, std::span<const std::byte> encoded);
  std::vector<std::byte> header() const;  // everything before the data section, padded

  uint32_t alignment_ = 32;
  uint64_t kv_count_ = 0;
  std::vector<std::byte> kv_;  // encoded metadata
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
};

}  // namespace ds
