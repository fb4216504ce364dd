#include "checkpoint/gguf_writer.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/atomic_file.h"
#include "core/error.h"

namespace ds {

namespace {

// resize + memcpy rather than insert: GCC 12 warns (falsely) about insert of a few bytes.
void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<std::byte>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

uint32_t id(GgufValueType t) { return uint32_t(t); }

}  // namespace

void GgufWriter::put_kv(const std::string& key, uint32_t type, std::span<const std::byte> encoded) {
  DS_CHECK(!key.empty(), "GGUF writer: empty metadata key");
  DS_CHECK(std::find(keys_.begin(), keys_.end(), key) == keys_.end(), "GGUF writer: metadata key '" + key + "' set twice");
  keys_.push_back(key);
  put_string(kv_, key);
  put<uint32_t>(kv_, type);
  put_bytes(kv_, encoded.data(), encoded.size());
  ++kv_count_;
}

void GgufWriter::set_raw(const std::string& key, uint32_t type, std::span<const std::byte> encoded) { put_kv(key, type, encoded); }

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  std::vector<std::byte> b;
  put(b, v);
  put_kv(key, id(GgufValueType::U32), b);
  if (key == "general.alignment") alignment_ = v;
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  std::vector<std::byte> b;
  put(b, v);
  put_kv(key, id(GgufValueType::I32), b);
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  std::vector<std::byte> b;
  put(b, v);
  put_kv(key, id(GgufValueType::U64), b);
}
void GgufWriter::set_f32(const std::string& key, float v) {
  std::vector<std::byte> b;
  put(b, v);
  put_kv(key, id(GgufValueType::F32), b);
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  std::vector<std::byte> b;
  put<uint8_t>(b, v ? 1 : 0);
  put_kv(key, id(GgufValueType::Bool), b);
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  std::vector<std::byte> b;
  put_string(b, v);
  put_kv(key, id(GgufValueType::String), b);
}
void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  std::vector<std::byte> b;
  put<uint32_t>(b, id(GgufValueType::String));
  put<uint64_t>(b, v.size());
  for (const std::string& s : v) put_string(b, s);
  put_kv(key, id(GgufValueType::Array), b);
}
void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<std::byte> b;
  put<uint32_t>(b, id(GgufValueType::I32));
  put<uint64_t>(b, v.size());
  for (int32_t x : v) put(b, x);
  put_kv(key, id(GgufValueType::Array), b);
}
void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  std::vector<std::byte> b;
  put<uint32_t>(b, id(GgufValueType::F32));
  put<uint64_t>(b, v.size());
  for (float x : v) put(b, x);
  put_kv(key, id(GgufValueType::Array), b);
}
void GgufWriter::set_bools(const std::string& key, const std::vector<bool>& v) {
  std::vector<std::byte> b;
  put<uint32_t>(b, id(GgufValueType::Bool));
  put<uint64_t>(b, v.size());
  for (bool x : v) put<uint8_t>(b, x ? 1 : 0);
  put_kv(key, id(GgufValueType::Array), b);
}

void GgufWriter::add_tensor(const std::string& name, uint32_t ggml_type, std::vector<int64_t> dims, std::span<const std::byte> data) {
  for (const Tensor& t : tensors_) DS_CHECK(t.name != name, "GGUF writer: tensor '" + name + "' added twice");
  int be = 0, bb = 0;
  DS_CHECK(ggml_type_layout(ggml_type, &be, &bb), "GGUF writer: tensor '" + name + "': cannot write " + ggml_type_name(ggml_type));
  DS_CHECK(!dims.empty() && dims.size() <= size_t(kMaxGgufDims), "GGUF writer: tensor '" + name + "' needs 1..4 dims");
  uint64_t numel = 1;
  for (int64_t d : dims) {
    DS_CHECK(d > 0, "GGUF writer: tensor '" + name + "' has a dim <= 0");
    numel *= uint64_t(d);
  }
  DS_CHECK(dims[0] % be == 0, "GGUF writer: tensor '" + name + "': rows not a whole number of " + ggml_type_name(ggml_type) + " blocks");
  const uint64_t bytes = numel / uint64_t(be) * uint64_t(bb);
  DS_CHECK(bytes == data.size(), "GGUF writer: tensor '" + name + "' (" + ggml_type_name(ggml_type) + ") needs " +
                                     std::to_string(bytes) + " bytes, got " + std::to_string(data.size()));
  tensors_.push_back(Tensor{name, ggml_type, std::move(dims), std::vector<std::byte>(data.begin(), data.end())});
}

std::vector<std::byte> GgufWriter::header() const {
  std::vector<std::byte> h;
  put_bytes(h, "GGUF", 4);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, kv_count_);
  put_bytes(h, kv_.data(), kv_.size());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(h, t.name);
    put<uint32_t>(h, uint32_t(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(h, uint64_t(d));
    put<uint32_t>(h, t.type);
    put<uint64_t>(h, offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  h.resize((h.size() + alignment_ - 1) / alignment_ * alignment_);
  return h;
}

std::vector<std::byte> GgufWriter::to_bytes() const {
  std::vector<std::byte> out = header();
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  write_file_atomically(path, [&](int fd, const std::string& tmp) {
    const std::vector<std::byte> h = header();
    write_all(fd, h.data(), h.size(), tmp);
    const std::vector<std::byte> pad(alignment_);
    for (const Tensor& t : tensors_) {
      write_all(fd, t.data.data(), t.data.size(), tmp);
      const size_t rem = t.data.size() % alignment_;
      if (rem) write_all(fd, pad.data(), alignment_ - rem, tmp);
    }
  });
}

}  // namespace ds
