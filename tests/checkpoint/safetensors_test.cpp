#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "core/error.h"

namespace fs = std::filesystem;
using namespace ds;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "ds_st_" + std::to_string(::getpid()) + "_" + info->test_suite_name() +
                       "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';  // parameterised tests have '/' in their names
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << s;
}

// A raw file: 8-byte length, the given header text verbatim, then `data_bytes` zero bytes.
std::vector<std::byte> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> b;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b.push_back(std::byte((n >> (8 * i)) & 0xff));
  for (char c : header) b.push_back(std::byte(c));
  b.resize(b.size() + data_bytes, std::byte{0});
  return b;
}

std::vector<float> iota_values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (float(i) - float(n) / 2) * scale;
  return v;
}

// Expects SafetensorsFile::open to throw ds::Error whose message contains every needle.
void expect_open_error(const std::string& path, std::initializer_list<std::string> needles) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "expected ds::Error opening " << path;
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << "\n  lacks: " << n;
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trips

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, ValuesShapesAndMetadataSurvive) {
  TempDir dir;
  const DType dt = GetParam();
  // Values exactly representable in every dtype, so the comparison can be exact.
  std::vector<float> a = iota_values(6, 0.25f), b = iota_values(5, 1.0f);
  SafetensorsWriter w;
  w.add_f32_as("z.weight", dt, {2, 3}, a);
  w.add_f32_as("a.bias", dt, {5}, b);
  w.set_metadata("format", "pt");
  const std::string path = dir.file("model.safetensors");
  w.write(path);

  SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a.bias");  // sorted by name
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.data_offset() % 8, 0u) << "header must be padded to a multiple of 8";

  const TensorView* t = f.find("z.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, dt);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(t->nbytes, 6 * dtype_size(dt));
  EXPECT_EQ(t->to_f32(), a);
  const TensorView* u = f.find("a.bias");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->to_f32(), b);
  // Data is laid out in name order, back to back.
  EXPECT_EQ(static_cast<const std::byte*>(u->data) + u->nbytes, t->data);
  EXPECT_EQ(f.find("nope"), nullptr);

  WeightStore ws = WeightStore::open(dir.str());
  EXPECT_EQ(ws.names(), (std::vector<std::string>{"a.bias", "z.weight"}));
  EXPECT_EQ(ws.total_bytes(), 11 * dtype_size(dt));
  EXPECT_EQ(ws.get("z.weight", {2, 3}).numel(), 6);
  EXPECT_EQ(ws.get("z.weight", {-1, 3}).numel(), 6);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, RoundTrip,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Safetensors, RawBytesScalarAndEmptyTensors) {
  TempDir dir;
  SafetensorsWriter w;
  const uint16_t raw[3] = {0x3f80, 0xc000, 0x7fc0};  // bf16 1, -2, NaN
  w.add("bf", DType::BF16, {3}, std::as_bytes(std::span(raw)));
  const float s = 7.5f;
  w.add("scalar", DType::F32, {}, std::as_bytes(std::span(&s, 1)));
  w.add("empty", DType::F16, {0, 4}, {});
  w.write(dir.file("x.safetensors"));  // the only *.safetensors: found without an index

  WeightStore ws = WeightStore::open(dir.str());
  EXPECT_EQ(std::memcmp(ws.get("bf").data, raw, 6), 0);
  EXPECT_EQ(ws.get("scalar").numel(), 1);
  EXPECT_EQ(ws.get("scalar", {}).to_f32(), std::vector<float>{7.5f});
  EXPECT_EQ(ws.get("empty").numel(), 0);
  EXPECT_EQ(ws.get("empty").nbytes, 0u);
  EXPECT_EQ(ws.total_bytes(), 6u + 4u);

  // Moving the store keeps every view valid.
  WeightStore moved = std::move(ws);
  EXPECT_EQ(moved.get("scalar").to_f32(), std::vector<float>{7.5f});
}

TEST(Safetensors, WriterIsAtomicAndOverwrites) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  SafetensorsWriter w1;
  w1.add_f32_as("t", DType::F32, {1}, std::vector<float>{1.f});
  w1.write(path);
  SafetensorsFile old_map = SafetensorsFile::open(path);  // a reader holding the old file
  SafetensorsWriter w2;
  w2.add_f32_as("t", DType::F32, {2}, std::vector<float>{2.f, 3.f});
  w2.write(path);
  // The old mapping still sees the old contents: the new file replaced it by rename.
  EXPECT_EQ(old_map.find("t")->to_f32(), std::vector<float>{1.f});
  EXPECT_EQ(SafetensorsFile::open(path).find("t")->numel(), 2);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.str())) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "temporary file left behind";
  // to_bytes() is exactly what write() puts on disk.
  std::ifstream in(path, std::ios::binary);
  std::vector<char> disk((std::istreambuf_iterator<char>(in)), {});
  auto mem = w2.to_bytes();
  ASSERT_EQ(disk.size(), mem.size());
  EXPECT_EQ(std::memcmp(disk.data(), mem.data(), mem.size()), 0);
}

TEST(Safetensors, WriterRejectsBadInput) {
  SafetensorsWriter w;
  std::vector<std::byte> six(6);
  EXPECT_NE(error_of([&] { w.add("t", DType::F32, {2}, six); }).find("'t'"), std::string::npos);
  w.add("t", DType::F16, {3}, six);
  EXPECT_NE(error_of([&] { w.add("t", DType::F16, {3}, six); }).find("twice"), std::string::npos);
  EXPECT_THROW(w.add("neg", DType::F16, {-3}, six), Error);
  EXPECT_THROW(w.add("__metadata__", DType::F16, {3}, six), Error);
  EXPECT_THROW(w.add("big", DType::F32, {int64_t(1) << 62, 8}, six), Error);
  TempDir dir;
  EXPECT_NE(error_of([&] { w.write(dir.file("no/such/dir/x.safetensors")); }).find("no/such/dir"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Directories

TEST(WeightStore, ShardedWithIndex) {
  TempDir dir;
  SafetensorsWriter s1, s2;
  s1.add_f32_as("model.embed_tokens.weight", DType::BF16, {4, 2}, iota_values(8, 1.f));
  s1.add_f32_as("unlisted", DType::F32, {1}, std::vector<float>{0.f});  // ignored: not mapped
  s2.add_f32_as("lm_head.weight", DType::F16, {4, 2}, iota_values(8, 0.5f));
  s2.add_f32_as("model.norm.weight", DType::F32, {2}, std::vector<float>{1.f, 2.f});
  s1.write(dir.file("model-00001-of-00002.safetensors"));
  s2.write(dir.file("model-00002-of-00002.safetensors"));
  write_text(dir.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 56},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"
    }})");
  WeightStore ws = WeightStore::open(dir.str());
  EXPECT_EQ(ws.size(), 3u);
  EXPECT_EQ(ws.files().size(), 2u);
  EXPECT_EQ(ws.find("unlisted"), nullptr);
  EXPECT_EQ(ws.total_bytes(), 16u + 16u + 8u);
  EXPECT_EQ(ws.get("model.norm.weight", {2}).to_f32()[1], 2.f);
  EXPECT_EQ(ws.get("lm_head.weight", {4, 2}).to_f32()[0], -2.f);
  EXPECT_EQ(ws.get("model.embed_tokens.weight").dtype, DType::BF16);
}

TEST(WeightStore, IndexErrorsNameShardAndTensor) {
  TempDir dir;
  SafetensorsWriter s1;
  s1.add_f32_as("a", DType::F32, {1}, std::vector<float>{1.f});
  s1.write(dir.file("shard1.safetensors"));
  const std::string index = dir.file("model.safetensors.index.json");

  write_text(index, R"({"weight_map": {"a": "shard1.safetensors", "b": "shard2.safetensors"}})");
  std::string msg = error_of([&] { WeightStore::open(dir.str()); });
  EXPECT_NE(msg.find("shard2.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;

  write_text(index, R"({"weight_map": {"a": "shard1.safetensors", "ghost": "shard1.safetensors"}})");
  msg = error_of([&] { WeightStore::open(dir.str()); });
  EXPECT_NE(msg.find("'ghost'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shard1.safetensors"), std::string::npos) << msg;

  write_text(index, R"({"weight_map": {"a": "../shard1.safetensors"}})");
  EXPECT_NE(error_of([&] { WeightStore::open(dir.str()); }).find("inside the model directory"),
            std::string::npos);
  write_text(index, R"({"weight_map": )");
  EXPECT_NE(error_of([&] { WeightStore::open(dir.str()); }).find("index.json"), std::string::npos);
  write_text(index, R"({"metadata": {}})");
  EXPECT_NE(error_of([&] { WeightStore::open(dir.str()); }).find("weight_map"), std::string::npos);
}

TEST(WeightStore, MissingTensorAndShapeErrors) {
  TempDir dir;
  SafetensorsWriter w;
  w.add_f32_as("model.norm.weight", DType::F32, {4}, iota_values(4, 1.f));
  w.write(dir.file("model.safetensors"));
  WeightStore ws = WeightStore::open(dir.str());
  EXPECT_EQ(error_of([&] { ws.get("lm_head.weight"); }),
            "missing tensor 'lm_head.weight' in " + dir.str());
  std::string msg = error_of([&] { ws.get("model.norm.weight", {8}); });
  EXPECT_NE(msg.find("'model.norm.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [8]"), std::string::npos) << msg;
  EXPECT_THROW(ws.get("model.norm.weight", {4, 1}), Error);
}

TEST(WeightStore, DirectoryErrors) {
  TempDir dir;
  EXPECT_NE(error_of([&] { WeightStore::open(dir.str()); }).find(dir.str()), std::string::npos);
  EXPECT_THROW(WeightStore::open(dir.file("absent")), Error);
  SafetensorsWriter w;
  w.add_f32_as("a", DType::F32, {1}, std::vector<float>{1.f});
  w.write(dir.file("one.safetensors"));
  w.write(dir.file("two.safetensors"));
  std::string msg = error_of([&] { WeightStore::open(dir.str()); });
  EXPECT_NE(msg.find("one.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("two.safetensors"), std::string::npos) << msg;
  w.write(dir.file("model.safetensors"));  // the canonical name wins over the others
  EXPECT_EQ(WeightStore::open(dir.str()).size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each error names the file and, where there is one, the tensor.

TEST(SafetensorsErrors, ShortFileAndHeaderLength) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  write_bytes(p, {});
  expect_open_error(p, {p, "shorter than"});
  write_bytes(p, std::vector<std::byte>(5));
  expect_open_error(p, {p, "shorter than"});
  auto b = raw_file("{}", 0);
  b[0] = std::byte{0x40};  // 64 > 2-byte header
  write_bytes(p, b);
  expect_open_error(p, {p, "exceeds"});
  b[0] = std::byte{0};
  b[7] = std::byte{0x10};  // ~1.1e18
  write_bytes(p, b);
  expect_open_error(p, {p, "absurd"});
  write_bytes(p, raw_file("{}", 0));
  EXPECT_TRUE(SafetensorsFile::open(p).tensors().empty());  // a valid, empty file
}

struct BadHeader {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> needles;
};

TEST(SafetensorsErrors, MalformedHeaders) {
  const std::vector<BadHeader> cases = {
      {"invalid json", R"({"w": {"dtype": "F32", )", 0, {"not valid JSON"}},
      {"not an object", R"([1, 2])", 0, {"not a JSON object"}},
      {"entry not object", R"({"w": 3})", 0, {"'w'", "not a JSON object"}},
      {"no dtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, {"'w'", "dtype"}},
      {"unsupported", R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8,
       {"unsupported dtype I64 for tensor 'w'"}},
      {"unsupported fp8", R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", 1,
       {"unsupported dtype F8_E4M3 for tensor 'w'"}},
      {"lowercase", R"({"w": {"dtype": "bf16", "shape": [1], "data_offsets": [0, 2]}})", 2,
       {"unknown dtype", "'w'"}},
      {"negative dim", R"({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}})", 8,
       {"'w'", "negative"}},
      {"float dim", R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8,
       {"'w'", "non-negative integers"}},
      {"three offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8,
       {"'w'", "data_offsets"}},
      {"decreasing offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8,
       {"'w'", "end before begin"}},
      {"negative offset", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 8,
       {"'w'", "data_offsets"}},
      {"past end", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12,
       {"'w'", "past the data section"}},
      {"size mismatch", R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})", 8,
       {"'w'", "needs 6"}},
      {"overlap", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12, {"'b'", "overlaps tensor 'a'"}},
      {"numel overflow",
       R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 2], "data_offsets": [0, 0]}})",
       0, {"'w'", "overflows"}},
      {"bytes overflow",
       R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0,
       {"'w'", "overflows"}},
      {"huge offset",
       R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 18446744073709551615]}})",
       0, {"'w'", "past the data section"}},
      {"duplicate", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                        "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       8, {"'w'", "twice"}},
      {"metadata value", R"({"__metadata__": {"format": 1}})", 0, {"__metadata__", "format"}},
      {"metadata type", R"({"__metadata__": [1]})", 0, {"__metadata__"}},
      // Nothing in a header nests deeper than 3 (the file's object, an entry, its shape), so
      // nothing deeper is built: a million levels is refused while parsing, naming the limit.
      {"nested shape", R"({"w": {"dtype": "F32", "shape": [[1]], "data_offsets": [0, 4]}})", 4,
       {"header: JSON nests deeper than 3 levels"}},
      {"deep", "{\"w\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}", 0,
       {"header: JSON nests deeper than 3 levels"}},
      {"nested metadata", R"({"__metadata__": {"a": {"b": [1]}}})", 0, {"header: JSON nests deeper than 3 levels"}},
      {"too many dims", R"({"w": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]}})", 4,
       {"'w'", "shape has 9 dims, outside [0, 8]"}},
  };
  TempDir dir;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string p = dir.file("bad.safetensors");
    write_bytes(p, raw_file(c.header, c.data_bytes));
    std::vector<std::string> needles = c.needles;
    needles.push_back(p);
    try {
      SafetensorsFile::open(p);
      ADD_FAILURE() << "expected ds::Error";
    } catch (const Error& e) {
      std::string msg = e.what();
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << "\n  lacks: " << n;
    }
  }
}

TEST(SafetensorsErrors, AcceptsPaddingGapsAndTrailingBytes) {
  TempDir dir;
  const std::string p = dir.file("ok.safetensors");
  // Trailing spaces in the header (the format's padding), a gap between tensors, a zero-size
  // tensor sitting inside another's bytes, and bytes after the last tensor are all harmless.
  write_bytes(p, raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                              "e": {"dtype": "F16", "shape": [0], "data_offsets": [2, 2]},
                              "b": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
                              "__metadata__": {}}     )",
                          20));
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.tensors().size(), 3u);
}

// ---------------------------------------------------------------------------------------------
// Fuzz: mutated files must load cleanly or throw ds::Error - never crash, never hand out a
// view outside the mapping. Run under -DDS_SANITIZE=ON in CI.

TEST(SafetensorsFuzz, MutatedFilesLoadOrThrow) {
  TempDir dir;
  SafetensorsWriter w;
  w.add_f32_as("model.layers.0.mlp.up_proj.weight", DType::BF16, {4, 3}, iota_values(12, 0.5f));
  w.add_f32_as("model.norm.weight", DType::F32, {3}, std::vector<float>{1.f, 2.f, 3.f});
  w.add_f32_as("lm_head.weight", DType::F16, {2, 3}, iota_values(6, 1.f));
  w.add("empty", DType::F32, {0}, {});
  w.set_metadata("format", "pt");
  const std::vector<std::byte> base = w.to_bytes();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(base[i]);

  // Bytes that turn JSON into other JSON more often than random bytes do.
  static const char kJsonish[] = "0123456789-{}[]\":, eE.+ntfu\\";
  std::mt19937_64 rng(0x5afe7e45);
  auto uniform = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const std::string p = dir.file("fuzz.safetensors");
  int loaded = 0, rejected = 0;

  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::byte> b = base;
    const int kind = int(uniform(6));
    if (kind == 0 || kind == 5) {  // mutate header bytes
      const int edits = 1 + int(uniform(4));
      for (int e = 0; e < edits; ++e) {
        size_t at = 8 + size_t(uniform(header_len));
        b[at] = uniform(2) ? std::byte(kJsonish[uniform(sizeof(kJsonish) - 1)])
                           : std::byte(uniform(256));
      }
    }
    if (kind == 1 || kind == 5) {  // rewrite the header length field
      uint64_t n;
      switch (uniform(4)) {
        case 0: n = header_len + uniform(64) - 32; break;
        case 1: n = uniform(b.size() + 16); break;
        case 2: n = rng(); break;
        default: n = kMaxSafetensorsHeaderBytes + uniform(3) - 1; break;
      }
      for (int i = 0; i < 8; ++i) b[size_t(i)] = std::byte((n >> (8 * i)) & 0xff);
    }
    if (kind == 2) b.resize(size_t(uniform(b.size() + 1)));  // truncate
    if (kind == 3 || kind == 5) {                             // append garbage
      const size_t extra = 1 + size_t(uniform(64));
      for (size_t i = 0; i < extra; ++i) b.push_back(std::byte(uniform(256)));
    }
    if (kind == 4) {  // cut into the header and pad with garbage
      b.resize(8 + size_t(uniform(header_len)));
      for (size_t i = 0, n = uniform(32); i < n; ++i) b.push_back(std::byte(kJsonish[uniform(sizeof(kJsonish) - 1)]));
    }
    write_bytes(p, b);

    try {
      SafetensorsFile f = SafetensorsFile::open(p);
      ++loaded;
      const auto mapped = f.bytes();
      ASSERT_EQ(mapped.size(), b.size());
      for (const TensorView& t : f.tensors()) {
        const auto* d = static_cast<const std::byte*>(t.data);
        ASSERT_GE(d, mapped.data() + f.data_offset()) << "iter " << iter << " " << t.name;
        ASSERT_LE(d + t.nbytes, mapped.data() + mapped.size()) << "iter " << iter << " " << t.name;
        ASSERT_EQ(t.nbytes, size_t(t.numel()) * dtype_size(t.dtype)) << "iter " << iter;
        // Touch every byte: a view outside the mapping would fault here.
        unsigned sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(d[i]);
        (void)sum;
      }
    } catch (const Error&) {
      ++rejected;  // any other exception type fails the test
    }
  }
  // Both outcomes must occur, or the mutations are not exercising the parser.
  EXPECT_GT(loaded, 50);
  EXPECT_GT(rejected, 50);
}
