#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/error.h"
#include "core/json_parse.h"

namespace ds {

// Tensor data is handed out as raw pointers to little-endian bytes.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void TensorView::copy_as_f32(float* out) const {
  const auto* src = static_cast<const std::byte*>(data);
  const size_t n = nbytes / dtype_size(dtype);
  if (dtype == DType::F32) {
    std::memcpy(out, src, n * 4);
    return;
  }
  if (dtype == DType::I8 || dtype == DType::U8) {  // the codes themselves, not what they encode
    for (size_t i = 0; i < n; ++i)
      out[i] = dtype == DType::I8 ? float(static_cast<int8_t>(src[i])) : float(static_cast<uint8_t>(src[i]));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> v(nbytes / dtype_size(dtype));
  copy_as_f32(v.data());
  return v;
}

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw Error("safetensors file '" + path + "': " + msg);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& msg) {
  fail(path, "tensor '" + name + "': " + msg);
}

// Valid safetensors dtypes DeltaServe does not read: named so the error says "unsupported"
// rather than "unknown" for a well-formed checkpoint in a format we do not serve.
bool is_known_safetensors_dtype(std::string_view s) {
  static constexpr std::string_view kKnown[] = {
      "BOOL", "I16",     "U16",     "I32",     "U32",     "I64",
      "U64",  "F64",     "F8_E4M3", "F8_E5M2", "F8_E8M0", "E8M0",    "F4",      "F6_E2M3",
      "F6_E3M2", "C64",  "F8_E4M3FN", "F8_E5M2FNUZ", "F8_E4M3FNUZ"};
  return std::find(std::begin(kKnown), std::end(kKnown), s) != std::end(kKnown);
}

// Exact safetensors spelling only: core's parse_dtype also accepts "bf16" etc., which a
// conforming file never contains.
bool parse_file_dtype(std::string_view s, DType* out) {
  if (s == "F32") { *out = DType::F32; return true; }
  if (s == "BF16") { *out = DType::BF16; return true; }
  if (s == "F16") { *out = DType::F16; return true; }
  // Quantized weights' codes and scales (kernels/quant_formats.h).
  if (s == "I8") { *out = DType::I8; return true; }
  if (s == "U8") { *out = DType::U8; return true; }
  return false;
}

// A JSON value that is a short, printable snippet for an error message.
std::string snippet(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

TensorView parse_entry(const std::string& path, const std::string& name, const json& e,
                       const std::byte* data_section, uint64_t data_size) {
  if (!e.is_object()) fail_tensor(path, name, "entry is not a JSON object: " + snippet(e));

  TensorView t;
  t.name = name;

  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) fail_tensor(path, name, "missing or non-string 'dtype'");
  const std::string& dts = dt->get_ref<const std::string&>();
  if (!parse_file_dtype(dts, &t.dtype)) {
    if (is_known_safetensors_dtype(dts))
      fail(path, "unsupported dtype " + dts + " for tensor '" + name +
                     "' (DeltaServe reads F32, BF16, F16)");
    fail(path, "unknown dtype " + snippet(*dt) + " for tensor '" + name + "'");
  }

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) fail_tensor(path, name, "missing or non-array 'shape'");
  if (sh->size() > kMaxSafetensorsDims)
    fail_tensor(path, name, "shape has " + std::to_string(sh->size()) + " dims, outside [0, " +
                                std::to_string(kMaxSafetensorsDims) + "]");
  uint64_t numel = 1;
  for (const json& d : *sh) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      fail_tensor(path, name, "negative dimension in shape " + snippet(*sh));
    if (!d.is_number_unsigned())
      fail_tensor(path, name, "shape must hold non-negative integers, got " + snippet(*sh));
    uint64_t v = d.get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_tensor(path, name, "dimension too large in shape " + snippet(*sh));
    if (__builtin_mul_overflow(numel, v, &numel))
      fail_tensor(path, name, "element count of shape " + snippet(*sh) + " overflows");
    t.shape.push_back(int64_t(v));
  }
  uint64_t nbytes = 0;
  if (numel > uint64_t(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes))
    fail_tensor(path, name, "byte size of shape " + snippet(*sh) + " overflows");

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail_tensor(path, name, "'data_offsets' must be two non-negative integers [begin, end]");
  uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end)
    fail_tensor(path, name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                "] end before begin");
  if (end > data_size)
    fail_tensor(path, name, "data_offsets end " + std::to_string(end) +
                                " is past the data section (" + std::to_string(data_size) +
                                " bytes); file truncated?");
  if (end - begin != nbytes)
    fail_tensor(path, name, "holds " + std::to_string(end - begin) + " bytes but " +
                                std::string(dtype_name(t.dtype)) + " " + snippet(*sh) + " needs " +
                                std::to_string(nbytes));
  t.nbytes = size_t(nbytes);
  t.data = data_section + begin;
  return t;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path, bool prefetch) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path, prefetch);
  const std::byte* base = f.file_.data();
  const uint64_t size = f.file_.size();

  if (size < 8)
    fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(base[i]);
  if (n > kMaxSafetensorsHeaderBytes)
    fail(path, "header length " + std::to_string(n) + " is absurd (limit " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + "); corrupt file?");
  if (n > size - 8)
    fail(path, "header length " + std::to_string(n) + " exceeds the file (" +
                   std::to_string(size) + " bytes)");
  f.data_offset_ = size_t(8 + n);

  // nlohmann keeps the last of duplicate keys silently; the format forbids duplicates, and a
  // dropped entry would hide data, so they are caught while parsing (keys of the top object
  // arrive at depth 1).
  std::string duplicate;
  std::set<std::string, std::less<>> seen;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
      if (seen.size() > kMaxSafetensorsTensors)
        throw Error("safetensors file '" + path + "': the header has more than " + std::to_string(kMaxSafetensorsTensors) +
                    " entries");
    }
    return true;
  };
  const char* hb = reinterpret_cast<const char*>(base + 8);
  json header;
  try {
    // The header is {name: {"dtype", "shape": [..], "data_offsets": [..]}, "__metadata__": {..}}:
    // nothing in it nests deeper than 3, so nothing deeper is built.
    header = parse_json(std::string_view(hb, size_t(n)), "header", 3, cb);
  } catch (const JsonError& e) {
    fail(path, e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  if (!duplicate.empty()) fail_tensor(path, duplicate, "appears twice in the header");

  const std::byte* data_section = base + f.data_offset_;
  const uint64_t data_size = size - f.data_offset_;
  f.tensors_.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, "'__metadata__' is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail(path, "'__metadata__' value for key '" + m.key() + "' is not a string");
        f.metadata_.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(path, it.key(), *it, data_section, data_size));
  }
  // json objects iterate in key order, but sort anyway: find() relies on it.
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });

  // Overlap check over tensors ordered by start; empty tensors occupy no bytes.
  std::vector<const TensorView*> by_start;
  for (const TensorView& t : f.tensors_)
    if (t.nbytes) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](const TensorView* a, const TensorView* b) {
    return a->data < b->data;
  });
  for (size_t i = 1; i < by_start.size(); ++i) {
    const TensorView* prev = by_start[i - 1];
    const TensorView* cur = by_start[i];
    auto prev_end = static_cast<const std::byte*>(prev->data) + prev->nbytes;
    if (static_cast<const std::byte*>(cur->data) < prev_end)
      fail_tensor(path, cur->name, "data overlaps tensor '" + prev->name + "'");
  }
  return f;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

namespace {

std::string read_text_file(const fs::path& p) {
  MappedFile m = MappedFile::open(p.string());
  if (m.size() == 0) return {};
  return std::string(reinterpret_cast<const char*>(m.data()), m.size());
}

// A shard name from index.json must stay inside the model directory.
bool is_safe_relative(const std::string& s) {
  if (s.empty()) return false;
  fs::path p(s);
  if (p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

WeightStore WeightStore::from_views(std::string origin, std::vector<TensorView> views, std::shared_ptr<const void> keep,
                                    std::vector<std::span<const std::byte>> content) {
  WeightStore ws;
  ws.dir_ = std::move(origin);
  ws.keep_ = std::move(keep);
  ws.content_ = std::move(content);
  for (TensorView& v : views) {
    ws.own_views_.push_back(std::make_unique<TensorView>(std::move(v)));
    const TensorView* t = ws.own_views_.back().get();
    if (!ws.index_.emplace(t->name, t).second) throw Error("tensor '" + t->name + "' appears twice in " + ws.dir_);
    ws.total_bytes_ += t->nbytes;
  }
  return ws;
}

uint64_t WeightStore::fingerprint() const {
  // XXH3 runs at memory speed: a 200 MB checkpoint costs ~20 ms at start-up.
  uint64_t h = 0;
  for (const auto& f : files_) h = XXH3_64bits_withSeed(f->bytes().data(), f->bytes().size(), h);
  for (const auto& c : content_) h = XXH3_64bits_withSeed(c.data(), c.size(), h);
  return h;
}

WeightStore WeightStore::open(const std::string& dir) {
  WeightStore ws;
  ws.dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("model directory '" + dir + "' does not exist");

  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  auto add_file = [&](const fs::path& p) -> SafetensorsFile& {
    ws.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(p.string(), true)));
    return *ws.files_.back();
  };

  if (fs::is_regular_file(index_path, ec)) {
    const std::string where = index_path.string();
    const json index = parse_json(read_text_file(index_path), where);
    if (!index.is_object()) throw Error(where + ": not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object())
      throw Error(where + ": missing or non-object 'weight_map'");
    if (wm->empty()) throw Error(where + ": 'weight_map' is empty");

    // Group tensors by shard so each shard is opened once.
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string())
        throw Error(where + ": weight_map entry for tensor '" + it.key() + "' is not a string");
      const std::string& shard = it->get_ref<const std::string&>();
      if (!is_safe_relative(shard))
        throw Error(where + ": tensor '" + it.key() + "' maps to shard '" + shard +
                    "', which is not a file inside the model directory");
      by_shard[shard].push_back(it.key());
    }
    for (const auto& [shard, tensors] : by_shard) {
      const fs::path sp = root / shard;
      if (!fs::is_regular_file(sp, ec))
        throw Error(where + ": shard '" + shard + "' (holding tensor '" + tensors.front() +
                    "') does not exist in " + dir);
      const SafetensorsFile& f = add_file(sp);
      for (const std::string& name : tensors) {
        const TensorView* t = f.find(name);
        if (!t)
          throw Error(where + ": tensor '" + name + "' is mapped to shard '" + shard +
                      "' but that shard does not contain it");
        ws.index_.emplace(name, t);
      }
    }
  } else {
    fs::path single = root / "model.safetensors";
    if (!fs::is_regular_file(single, ec)) {
      std::vector<fs::path> found;
      for (const auto& de : fs::directory_iterator(root, ec))
        if (de.path().extension() == ".safetensors" && de.is_regular_file(ec))
          found.push_back(de.path());
      if (found.empty())
        throw Error("no model.safetensors, model.safetensors.index.json or *.safetensors in '" +
                    dir + "'");
      if (found.size() > 1) {
        std::sort(found.begin(), found.end());
        std::string list;
        for (const auto& p : found) list += (list.empty() ? "" : ", ") + p.filename().string();
        throw Error("'" + dir + "' holds several .safetensors files (" + list +
                    ") but no model.safetensors.index.json saying how they combine");
      }
      single = found.front();
    }
    const SafetensorsFile& f = add_file(single);
    for (const TensorView& t : f.tensors()) ws.index_.emplace(t.name, &t);
  }
  for (const auto& [name, t] : ws.index_) ws.total_bytes_ += t->nbytes;
  return ws;
}

const TensorView* WeightStore::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& WeightStore::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) throw Error("missing tensor '" + std::string(name) + "' in " + dir_);
  return *t;
}

const TensorView& WeightStore::get(std::string_view name,
                                   std::initializer_list<int64_t> expected_shape) const {
  return get(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
}

const TensorView& WeightStore::get(std::string_view name,
                                   std::span<const int64_t> expected_shape) const {
  const TensorView& t = get(name);
  bool ok = t.shape.size() == expected_shape.size();
  for (size_t i = 0; ok && i < expected_shape.size(); ++i)
    ok = expected_shape[i] == -1 || expected_shape[i] == t.shape[i];
  if (!ok)
    throw Error("tensor '" + t.name + "' in " + dir_ + " has shape " + shape_string(t.shape) +
                ", expected " + shape_string(expected_shape));
  return t;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

}  // namespace ds
