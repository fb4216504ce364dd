// Reading safetensors checkpoints: one file, or a directory of shards named by
// model.safetensors.index.json, memory-mapped and validated before any tensor is handed out.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the data section; offsets are relative to its start (byte 8 + N).
//
// ALIGNMENT: TensorView::data points straight into the mapping. The format puts the data section
// at 8 + N and packs tensors back to back, so a tensor is aligned only if the writer made it so
// (ours pads N to a multiple of 8). Consumers must not assume any alignment: read through
// memcpy / unaligned loads (TensorView::copy_as_f32 does), or repack into aligned memory at
// load time. In particular core's load_as_f32 must not be pointed at a mapped tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/mapped_file.h"
#include "core/dtype.h"

namespace ds {

// One tensor inside a mapped file. Valid as long as the file (or store) that made it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;    // empty = scalar (one element)
  const void* data = nullptr;    // little-endian, possibly unaligned (see above)
  size_t nbytes = 0;             // == numel() * dtype_size(dtype), checked at load

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // cannot overflow: checked when the header was parsed
    return n;
  }
  // Converts all numel() elements to f32 in `out`, reading through memcpy so an unaligned
  // tensor is fine (core's load_as_f32 dereferences typed pointers and needs alignment).
  void copy_as_f32(float* out) const;
  std::vector<float> to_f32() const;
};

// "[2, 3]" - used in error messages.
std::string shape_string(std::span<const int64_t> shape);

// Upper bound on the JSON header; real checkpoints have a few MB at most, so anything larger
// is a corrupt length field and is refused before it is used to size anything.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Tensors in one file and dims of one tensor: a shard of the largest models holds a few
// thousand tensors of at most 5 dims.
inline constexpr size_t kMaxSafetensorsTensors = 1u << 20;
inline constexpr size_t kMaxSafetensorsDims = 8;

class SafetensorsFile {
 public:
  // Maps and validates the whole header. Throws ds::Error naming the file and, where one is
  // involved, the tensor: short file, bad header length, invalid JSON, malformed entry,
  // unsupported dtype (F32, BF16, F16 are read, and I8 / U8 for quantized weights), negative dims, bad data_offsets, data past
  // the end of the file, byte size != numel * dtype size, overlapping tensors, size overflow.
  static SafetensorsFile open(const std::string& path, bool prefetch = false);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_.path(); }
  // All tensors, sorted by name.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The whole mapped file, and where its data section starts (8 + header length).
  std::span<const std::byte> bytes() const { return file_.bytes(); }
  size_t data_offset() const { return data_offset_; }

 private:
  SafetensorsFile() = default;

  MappedFile file_;
  size_t data_offset_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of one model directory, by name, across one or many shard files.
class WeightStore {
 public:
  // Opens, in order of preference: model.safetensors.index.json (every shard it names must
  // exist and hold every tensor mapped to it; tensors a shard holds but the map does not name
  // are ignored, as Hugging Face loaders do), model.safetensors, or the only *.safetensors file
  // in dir. Throws ds::Error naming the directory, shard and tensor at fault.
  // A GGUF file is opened through model/model_files.h's open_model_weights: its tensors under
  // the names a checkpoint folder would use, which take the architecture to know.
  static WeightStore open(const std::string& dir);
  // A store over tensors translated from another format: `views` point into memory `keep` holds
  // alive (a mapped file, repacked buffers); `content` is what the fingerprint hashes (the
  // source file's bytes). `origin` names the source in errors.
  static WeightStore from_views(std::string origin, std::vector<TensorView> views, std::shared_ptr<const void> keep,
                                std::vector<std::span<const std::byte>> content);

  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const TensorView* find(std::string_view name) const;
  // Throws "missing tensor 'X' in DIR".
  const TensorView& get(std::string_view name) const;
  // As get(), and checks the shape; -1 in expected_shape matches any size. Throws naming the
  // expected and the found shape.
  const TensorView& get(std::string_view name, std::initializer_list<int64_t> expected_shape) const;
  const TensorView& get(std::string_view name, std::span<const int64_t> expected_shape) const;

  std::vector<std::string> names() const;  // sorted
  size_t size() const { return index_.size(); }
  size_t total_bytes() const { return total_bytes_; }
  const std::string& dir() const { return dir_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // XXH3 of every source file's bytes, header and data: two checkpoints of one shape but other
  // weights differ here.
  uint64_t fingerprint() const;

 private:
  WeightStore() = default;

  std::string dir_;
  // unique_ptr so TensorView addresses held in index_ survive moves of the vector.
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
  // Translated stores (from_views): the views, what backs them, and the bytes to fingerprint.
  std::vector<std::unique_ptr<TensorView>> own_views_;
  std::shared_ptr<const void> keep_;
  std::vector<std::span<const std::byte>> content_;
  size_t total_bytes_ = 0;
};

}  // namespace ds
