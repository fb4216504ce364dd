#include "checkpoint/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace ds {

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: return "u8";
    case GgufValueType::I8: return "i8";
    case GgufValueType::U16: return "u16";
    case GgufValueType::I16: return "i16";
    case GgufValueType::U32: return "u32";
    case GgufValueType::I32: return "i32";
    case GgufValueType::F32: return "f32";
    case GgufValueType::Bool: return "bool";
    case GgufValueType::String: return "string";
    case GgufValueType::Array: return "array";
    case GgufValueType::U64: return "u64";
    case GgufValueType::I64: return "i64";
    case GgufValueType::F64: return "f64";
  }
  return "?";
}

std::string ggml_type_name(uint32_t type) {
  // ggml's enum, ids that were retired left empty.
  static const char* const kNames[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "",       "",       "Q5_0",   "Q5_1",  "Q8_0",   "Q8_1",
      "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S", "IQ2_S",  "IQ4_XS", "I8",    "I16",    "I32",    "I64",   "F64",    "IQ1_M",
      "BF16",    "",      "",       "",      "TQ1_0",  "TQ2_0",  "",       "",      "",       "MXFP4"};
  if (type < std::size(kNames) && *kNames[type]) return kNames[type];
  return "type " + std::to_string(type);
}

bool ggml_type_layout(uint32_t type, int* block_elems, int* block_bytes) {
  switch (GgmlType(type)) {
    case GgmlType::F32: *block_elems = 1, *block_bytes = 4; return true;
    case GgmlType::F16:
    case GgmlType::BF16: *block_elems = 1, *block_bytes = 2; return true;
    case GgmlType::Q8_0: *block_elems = 32, *block_bytes = 34; return true;  // f16 scale, 32 x i8
    case GgmlType::Q4_0: *block_elems = 32, *block_bytes = 18; return true;  // f16 scale, 16 bytes of nibbles
    case GgmlType::MXFP4: *block_elems = 32, *block_bytes = 17; return true; // e8m0 scale, 16 bytes of nibbles
  }
  return false;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // cannot overflow: checked when the header was parsed
  return n;
}

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw Error("GGUF " + path + ": " + what); }

// A bounds-checked little-endian reader over the mapping.
struct Cursor {
  const std::byte* base;
  uint64_t size;
  uint64_t pos = 0;
  const std::string& path;

  void need(uint64_t n, const char* what) const {
    if (n > size - pos)
      fail(path, std::string(what) + " at byte " + std::to_string(pos) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes)");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  // A string of at most `max` bytes (and no more than the file has left).
  std::string string(const char* what, uint64_t max = UINT64_MAX) {
    const uint64_t n = read<uint64_t>(what);
    if (n > max)
      fail(path, std::string(what) + " at byte " + std::to_string(pos - 8) + " is " + std::to_string(n) +
                     " bytes long, outside [0, " + std::to_string(max) + "]");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base + pos), size_t(n));
    pos += n;
    return s;
  }
  uint64_t left() const { return size - pos; }
};

bool known_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::F64); }

size_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    case GgufValueType::String: return 8;  // at least its length
    case GgufValueType::Array: return 12;
  }
  return 1;
}

// Reads one scalar of type t into v's scalar fields; for integers both i and u are set when the
// value fits (u64 values past INT64_MAX leave i at its limit, which no key of ours reaches).
void read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& key) {
  const std::string what = "value of '" + key + "'";
  switch (t) {
    case GgufValueType::U8: v.u = c.read<uint8_t>(what.c_str()); v.i = int64_t(v.u); break;
    case GgufValueType::I8: v.i = c.read<int8_t>(what.c_str()); v.u = uint64_t(v.i); break;
    case GgufValueType::U16: v.u = c.read<uint16_t>(what.c_str()); v.i = int64_t(v.u); break;
    case GgufValueType::I16: v.i = c.read<int16_t>(what.c_str()); v.u = uint64_t(v.i); break;
    case GgufValueType::U32: v.u = c.read<uint32_t>(what.c_str()); v.i = int64_t(v.u); break;
    case GgufValueType::I32: v.i = c.read<int32_t>(what.c_str()); v.u = uint64_t(v.i); break;
    case GgufValueType::U64:
      v.u = c.read<uint64_t>(what.c_str());
      v.i = v.u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(v.u);
      break;
    case GgufValueType::I64: v.i = c.read<int64_t>(what.c_str()); v.u = uint64_t(v.i); break;
    case GgufValueType::F32: v.f = c.read<float>(what.c_str()); break;
    case GgufValueType::F64: v.f = c.read<double>(what.c_str()); break;
    case GgufValueType::Bool: {
      const uint8_t b = c.read<uint8_t>(what.c_str());
      if (b > 1) fail(c.path, "key '" + key + "': a bool must be 0 or 1, got " + std::to_string(b));
      v.b = b != 0;
      v.i = v.b;
      break;
    }
    case GgufValueType::String: v.s = c.string(what.c_str()); break;
    case GgufValueType::Array: fail(c.path, "key '" + key + "': nested arrays are not supported");
  }
}

GgufValue read_value(Cursor& c, uint32_t type_id, const std::string& key) {
  if (!known_value_type(type_id)) fail(c.path, "key '" + key + "' has value type " + std::to_string(type_id) + ", which GGUF does not define (0..12)");
  GgufValue v;
  v.type = GgufValueType(type_id);
  if (v.type != GgufValueType::Array) {
    read_scalar(c, v.type, v, key);
    return v;
  }
  const uint32_t elem = c.read<uint32_t>(("array type of '" + key + "'").c_str());
  if (!known_value_type(elem)) fail(c.path, "key '" + key + "': array of value type " + std::to_string(elem) + ", which GGUF does not define");
  v.elem = GgufValueType(elem);
  if (v.elem == GgufValueType::Array) fail(c.path, "key '" + key + "': nested arrays are not supported");
  const uint64_t n = c.read<uint64_t>(("array length of '" + key + "'").c_str());
  // Every element takes at least scalar_bytes: a count the rest of the file cannot hold is corrupt.
  if (n > c.left() / scalar_bytes(v.elem))
    fail(c.path, "key '" + key + "': array of " + std::to_string(n) + " elements cannot fit in the " + std::to_string(c.left()) +
                     " bytes left");
  // One that fits a large file may still be more than any real array (each element is held in
  // 8 bytes or more, whatever it takes in the file).
  if (n > kMaxGgufArrayElements)
    fail(c.path, "key '" + key + "': array of " + std::to_string(n) + " elements, outside [0, " +
                     std::to_string(kMaxGgufArrayElements) + "]");
  v.count = size_t(n);
  GgufValue e;
  for (uint64_t k = 0; k < n; ++k) {
    read_scalar(c, v.elem, e, key);
    if (v.elem == GgufValueType::String) v.strings.push_back(std::move(e.s));
    else if (v.elem == GgufValueType::F32 || v.elem == GgufValueType::F64) v.floats.push_back(e.f);
    else v.ints.push_back(e.i);
  }
  return v;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path, bool prefetch) {
  GgufFile g;
  g.file_ = MappedFile::open(path, prefetch);
  Cursor c{g.file_.data(), g.file_.size(), 0, path};
  if (c.size < 4 || std::memcmp(c.base, "GGUF", 4) != 0) fail(path, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  c.pos = 4;
  g.version_ = c.read<uint32_t>("version");
  if (g.version_ != 2 && g.version_ != 3)
    fail(path, "version " + std::to_string(g.version_) + " is not supported (2 and 3 are; version 1 used 32-bit counts)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A tensor's entry takes at least 32 bytes (name length, dims count, one dim, type, offset), a
  // metadata entry 13 (key length, type, a one-byte value).
  if (n_tensors > kMaxGgufTensors || n_tensors > c.left() / 32)
    fail(path, "tensor count " + std::to_string(n_tensors) + " is impossible for a file of " + std::to_string(c.size) +
                   " bytes (at most " + std::to_string(std::min<uint64_t>(kMaxGgufTensors, c.left() / 32)) + ")");
  if (n_kv > kMaxGgufMetadata || n_kv > c.left() / 13)
    fail(path, "metadata count " + std::to_string(n_kv) + " is impossible for a file of " + std::to_string(c.size) +
                   " bytes (at most " + std::to_string(std::min<uint64_t>(kMaxGgufMetadata, c.left() / 13)) + ")");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key", kMaxGgufKeyBytes);
    if (key.empty()) fail(path, "metadata entry " + std::to_string(i) + " has an empty key");
    const uint32_t type = c.read<uint32_t>(("value type of '" + key + "'").c_str());
    GgufValue v = read_value(c, type, key);
    if (!g.metadata_.emplace(key, std::move(v)).second) fail(path, "key '" + key + "' appears twice");
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (!a->is_integer() || a->u == 0 || a->u > (1u << 16) || (a->u & (a->u - 1)) != 0)
      fail(path, "general.alignment must be a power of two in [1, 65536]");
    g.alignment_ = uint32_t(a->u);
  }

  // Grown as entries are read, not reserved from the count: the count was only checked to be
  // possible, and each entry read is bytes the file really has.
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.string("tensor name", kMaxGgufTensorNameBytes);
    if (t.name.empty()) fail(path, "tensor " + std::to_string(i) + " has an empty name");
    const uint32_t nd = c.read<uint32_t>("tensor dims");
    if (nd == 0 || nd > uint32_t(kMaxGgufDims))
      fail(path, "tensor '" + t.name + "' has " + std::to_string(nd) + " dims (1.." + std::to_string(kMaxGgufDims) + " allowed)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor dim");
      if (ne == 0 || ne > (uint64_t(1) << 40)) fail(path, "tensor '" + t.name + "' has dim " + std::to_string(d) + " = " + std::to_string(ne));
      if (numel > (uint64_t(1) << 50) / ne) fail(path, "tensor '" + t.name + "': its element count overflows");
      numel *= ne;
      t.dims.push_back(int64_t(ne));
    }
    t.type = c.read<uint32_t>("tensor type");
    t.offset = c.read<uint64_t>("tensor offset");
    if (ggml_type_name(t.type).rfind("type ", 0) == 0)
      fail(path, "tensor '" + t.name + "' has " + ggml_type_name(t.type) + ", which ggml does not define");
    int be = 0, bb = 0;
    if (ggml_type_layout(t.type, &be, &bb)) {
      if (t.dims[0] % be != 0)
        fail(path, "tensor '" + t.name + "' (" + ggml_type_name(t.type) + ") has rows of " + std::to_string(t.dims[0]) +
                       " elements, not a multiple of its block of " + std::to_string(be));
      t.nbytes = size_t(numel / uint64_t(be) * uint64_t(bb));
    }
    if (!g.tensor_index_.emplace(t.name, g.tensors_.size()).second) fail(path, "tensor '" + t.name + "' appears twice");
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (n_tensors > 0 && data_start > c.size) fail(path, "the data section would start past the end of the file");
  const uint64_t data_size = n_tensors > 0 ? c.size - data_start : 0;
  for (GgufTensor& t : g.tensors_) {
    if (t.offset % g.alignment_ != 0)
      fail(path, "tensor '" + t.name + "' starts at offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
                     std::to_string(g.alignment_));
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(path, "tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes at offset " + std::to_string(t.offset) +
                     ") runs past the end of the file (data section of " + std::to_string(data_size) + " bytes)");
    t.data = g.file_.data() + data_start + t.offset;
  }
  std::vector<const GgufTensor*> by_start;
  for (const GgufTensor& t : g.tensors_)
    if (t.nbytes) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i]->offset < by_start[i - 1]->offset + by_start[i - 1]->nbytes)
      fail(path, "tensor '" + by_start[i]->name + "' overlaps tensor '" + by_start[i - 1]->name + "'");
  return g;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
const GgufValue& need(const GgufFile& g, std::string_view key) {
  const GgufValue* v = g.find(key);
  if (!v) fail(g.path(), "metadata key '" + std::string(key) + "' is missing");
  return *v;
}
[[noreturn]] void wrong_type(const GgufFile& g, std::string_view key, const GgufValue& v, const char* wanted) {
  fail(g.path(), "metadata key '" + std::string(key) + "' is " + std::string(gguf_value_type_name(v.type)) + ", expected " + wanted);
}
}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = need(*this, key);
  if (v.type != GgufValueType::String) wrong_type(*this, key, v, "a string");
  return v.s;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = need(*this, key);
  if (!v.is_integer()) wrong_type(*this, key, v, "an integer");
  return v.i;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = need(*this, key);
  if (v.type == GgufValueType::F32 || v.type == GgufValueType::F64) return v.f;
  if (v.is_integer()) return double(v.i);
  wrong_type(*this, key, v, "a number");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = need(*this, key);
  if (v.type != GgufValueType::Bool) wrong_type(*this, key, v, "a bool");
  return v.b;
}

std::optional<int64_t> GgufFile::int_or_none(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return get_int(key);
}

std::optional<double> GgufFile::float_or_none(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return get_float(key);
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f && f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace ds
