// Reading GGUF files (llama.cpp's single-file checkpoint), memory-mapped and validated before any
// tensor or value is handed out.
//
// Layout (little-endian): "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count;
// the metadata as (string key, u32 value type, value); then per tensor (string name, u32 number
// of dims, u64 dims fastest-varying first, u32 ggml type, u64 offset); the data section starts at
// the next multiple of general.alignment (default 32), and every tensor's offset (relative to it)
// is a multiple of the alignment too. A string is a u64 byte length and its bytes; an array is a
// u32 element type, a u64 count and the elements.
//
// Tensor data points into the mapping. It is aligned to the file's alignment relative to the
// data section, but nothing checks the section itself lands on an aligned address: read it as
// bytes, or copy, as for safetensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/mapped_file.h"

namespace ds {

enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

// ggml's tensor types this reader knows the sizes of; the loader takes F32, F16, BF16, Q8_0,
// Q4_0 and MXFP4 and names any other in its error.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30, MXFP4 = 39 };
// "Q4_K", "IQ2_XS", ... for every type ggml defines (so an error can say what the file holds), or
// "type N" for an id ggml does not have.
std::string ggml_type_name(uint32_t type);
// Elements per block and bytes per block of the types above (F32: 1 and 4); false for others.
bool ggml_type_layout(uint32_t type, int* block_elems, int* block_bytes);

// One metadata value. Scalars of any integer type are read as i (signed) or u (unsigned);
// arrays hold one kind of element: integers, floats, bools or strings (nested arrays are refused).
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType elem = GgufValueType::U8;  // arrays only
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;  // arrays of any integer type or bool
  std::vector<double> floats;
  std::vector<std::string> strings;
  size_t count = 0;  // arrays: elements

  bool is_integer() const;
  bool is_array() const { return type == GgufValueType::Array; }
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;             // ggml type id
  std::vector<int64_t> dims;     // as stored: dims[0] is the row length (fastest-varying)
  uint64_t offset = 0;           // in the data section
  const std::byte* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  // Rows of dims[0] elements: the product of the other dims.
  int64_t rows() const { return dims.empty() ? 0 : numel() / dims[0]; }
};

// Upper bounds that keep a corrupt count from sizing anything; real files are far below them.
// Every count and length is also checked against the bytes left in the file before anything is
// allocated for it, so what the reader holds stays within a small multiple of the file's size.
inline constexpr uint64_t kMaxGgufTensors = 1u << 20;
inline constexpr uint64_t kMaxGgufMetadata = 1u << 20;
inline constexpr int kMaxGgufDims = 4;
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;          // the format's own limit
inline constexpr uint64_t kMaxGgufTensorNameBytes = 4096;   // ggml's is 63
inline constexpr uint64_t kMaxGgufArrayElements = 1u << 24;  // a vocabulary's tokens are ~10^5

class GgufFile {
 public:
  // Maps and validates the whole header. Throws ds::Error naming the file, and the key or tensor
  // at fault: bad magic, unsupported version, counts or lengths past the end of the file,
  // unknown value types, nested arrays, duplicate keys or tensor names, a bad general.alignment,
  // dims out of range or overflowing, a tensor type ggml does not define, a row length that is
  // not a whole number of blocks, a misaligned offset, data past the end or overlapping another
  // tensor. A tensor of a known but unsupported type is listed (so the caller can name it).
  static GgufFile open(const std::string& path, bool prefetch = false);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  std::span<const std::byte> bytes() const { return file_.bytes(); }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // Typed reads; each throws naming the file and key when the key is missing or of another type.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;      // any integer type
  double get_float(std::string_view key) const;     // F32, F64, or any integer type
  bool get_bool(std::string_view key) const;
  std::optional<int64_t> int_or_none(std::string_view key) const;
  std::optional<double> float_or_none(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const GgufTensor* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Whether path is a file that starts with the GGUF magic (a model path may be a folder or one).
bool is_gguf_file(const std::string& path);

}  // namespace ds
