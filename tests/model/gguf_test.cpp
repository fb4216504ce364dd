// GGUF: the container reader and writer (every value kind, strict refusals of truncated and
// mutated files), ggml's block layouts, and models written by `export-gguf` that load and
// compute exactly what their checkpoint folders do (the weights are the same numbers).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "kernels/quant_formats.h"
#include "model/config.h"
#include "model/ggml_blocks.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "model/model_files.h"
#include "model/quantize.h"
#include "model_util.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& tag) {
  return (fs::temp_directory_path() / ("ds-gguf-" + std::to_string(::getpid()) + "-" + tag)).string();
}

void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

std::string model_dir(const std::string& name) { return std::string(DS_SOURCE_DIR) + "/tests/data/models/" + name; }

// A small file with a value of every kind and two tensors.
GgufWriter sample() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_i32("x.i32", -7);
  w.set_u64("x.u64", 1ull << 40);
  w.set_f32("x.f32", 0.25f);
  w.set_bool("x.bool", true);
  w.set_strings("x.strings", {"a", "", "ccc"});
  w.set_i32s("x.ints", {1, -2, 3});
  w.set_f32s("x.floats", {0.5f, 1.5f});
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) - 10;
  w.add_tensor("t.f32", uint32_t(GgmlType::F32), {32, 2}, std::as_bytes(std::span<const float>(v)));
  std::vector<std::byte> q(34, std::byte{1});
  w.add_tensor("t.q8", uint32_t(GgmlType::Q8_0), {32}, q);
  return w;
}

TEST(GgufFile, ReadsWhatTheWriterWrote) {
  const std::string p = temp_path("sample.gguf");
  sample().write(p);
  EXPECT_TRUE(is_gguf_file(p));
  const GgufFile g = GgufFile::open(p);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 2);
  EXPECT_EQ(g.get_int("x.i32"), -7);
  EXPECT_EQ(g.get_int("x.u64"), int64_t(1) << 40);
  EXPECT_EQ(g.get_float("x.f32"), 0.25);
  EXPECT_TRUE(g.get_bool("x.bool"));
  EXPECT_EQ(g.find("x.strings")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(g.find("x.ints")->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.find("x.floats")->floats, (std::vector<double>{0.5, 1.5}));
  EXPECT_THROW(g.get_int("general.architecture"), Error);  // wrong type, named
  EXPECT_THROW(g.get_string("missing"), Error);
  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensor* t = g.find_tensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(t->rows(), 2);
  float x;
  std::memcpy(&x, t->data + 4 * 33, 4);
  EXPECT_EQ(x, 23.f);
  EXPECT_EQ(g.find_tensor("t.q8")->nbytes, 34u);
  EXPECT_EQ((g.find_tensor("t.q8")->data - g.bytes().data()) % 32, 0);
  fs::remove(p);
}

TEST(GgufFile, EveryTruncationIsRefusedCleanly) {
  const std::vector<std::byte> full = sample().to_bytes();
  const std::string p = temp_path("trunc.gguf");
  write_bytes(p, full);
  const GgufFile whole = GgufFile::open(p);
  const GgufTensor& last = whole.tensors().back();
  const size_t end = size_t(last.data - whole.bytes().data()) + last.nbytes;  // the padding after it is optional
  // Every cut inside the header, and through the data, fails.
  for (size_t n = 0; n < end; n += (n < 600 ? 1 : 7)) {
    write_bytes(p, std::vector<std::byte>(full.begin(), full.begin() + long(n)));
    EXPECT_THROW(GgufFile::open(p), Error) << "cut at " << n << " of " << full.size();
  }
  fs::remove(p);
}

// Overwrites bytes at the offset where `needle` (a key or name) ends.
std::vector<std::byte> patched(std::vector<std::byte> b, const std::string& needle, size_t skip, std::vector<uint8_t> bytes) {
  const std::string s(reinterpret_cast<const char*>(b.data()), b.size());
  const size_t at = s.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  for (size_t i = 0; i < bytes.size(); ++i) b[at + needle.size() + skip + i] = std::byte{bytes[i]};
  return b;
}

void expect_refused(const std::vector<std::byte>& b, const std::string& fragment) {
  const std::string p = temp_path("mut.gguf");
  write_bytes(p, b);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "opened a file that should fail with '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  fs::remove(p);
}

TEST(GgufFile, MutatedHeadersAreRefusedNamingWhatIsWrong) {
  const std::vector<std::byte> ok = sample().to_bytes();
  std::vector<std::byte> b = ok;
  b[0] = std::byte{'X'};
  expect_refused(b, "not a GGUF file");
  b = ok;
  b[4] = std::byte{1};
  expect_refused(b, "version 1");
  b = ok;
  b[8] = std::byte{0xff}, b[9] = std::byte{0xff}, b[10] = std::byte{0xff};
  expect_refused(b, "tensor count");
  b = ok;
  b[16] = std::byte{0xff}, b[17] = std::byte{0xff}, b[18] = std::byte{0xff};
  expect_refused(b, "metadata count");
  // value type of llama.block_count (u32 = 4) -> 13, which GGUF lacks
  expect_refused(patched(ok, "llama.block_count", 0, {13, 0, 0, 0}), "value type 13");
  // the string array -> an array of arrays
  expect_refused(patched(ok, "x.strings", 4, {9, 0, 0, 0}), "nested arrays");
  // its length -> 2^40 elements
  expect_refused(patched(ok, "x.strings", 8, {0, 0, 0, 0, 0, 1, 0, 0}), "cannot fit");
  // the bool -> 2
  expect_refused(patched(ok, "x.bool", 4, {2}), "bool must be 0 or 1");
  // t.f32's dims count -> 5
  expect_refused(patched(ok, "t.f32", 0, {5, 0, 0, 0}), "dims");
  // its first dim -> 0
  expect_refused(patched(ok, "t.f32", 4, {0, 0, 0, 0, 0, 0, 0, 0}), "dim 0 = 0");
  // t.q8's row length -> 31 (not whole blocks)
  expect_refused(patched(ok, "t.q8", 4, {31}), "not a multiple of its block");
  // t.q8's type -> 4 (retired in ggml)
  expect_refused(patched(ok, "t.q8", 12, {4}), "ggml does not define");
  // t.q8's offset -> 8 (misaligned), -> 0 (overlaps t.f32), -> far past the end
  expect_refused(patched(ok, "t.q8", 16, {8}), "not a multiple of the alignment");
  expect_refused(patched(ok, "t.q8", 16, {0, 0}), "overlaps");
  expect_refused(patched(ok, "t.q8", 16, {0, 0, 0, 1}), "past the end");
  // a second key spelled like the first
  expect_refused(patched(ok, "x.i32", -3, {'u', '6', '4'}), "appears twice");
}

TEST(GgufFile, AnAlignmentKeyMustBeAPowerOfTwo) {
  GgufWriter w;
  std::vector<std::byte> v = {std::byte{3}, std::byte{0}, std::byte{0}, std::byte{0}};
  w.set_raw("general.alignment", uint32_t(GgufValueType::U32), v);
  const std::string p = temp_path("align.gguf");
  w.write(p);
  EXPECT_THROW(GgufFile::open(p), Error);
  fs::remove(p);
}

TEST(GgmlBlocks, RepackingIsExactBothWaysAndFollowsGgmlsNibbleOrder) {
  for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::MXFP4}) {
    const int rows = 3, k = 64;
    std::vector<float> x(size_t(rows) * k);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f) * 3;
    std::vector<uint8_t> codes(rows * quant_code_bytes(f, k)), scales(rows * quant_scale_bytes(f, k));
    for (int r = 0; r < rows; ++r)
      quantize_row(f, x.data() + r * k, k, codes.data() + r * quant_code_bytes(f, k), scales.data() + r * quant_scale_bytes(f, k));
    int be = 0, bb = 0;
    ASSERT_TRUE(ggml_type_layout(ggml_type_of(f), &be, &bb));
    std::vector<std::byte> blocks(size_t(rows) * (k / be) * bb);
    codes_to_ggml_blocks(f, codes.data(), scales.data(), rows, k, blocks.data());
    std::vector<uint8_t> c2(codes.size()), s2(scales.size());
    ggml_blocks_to_codes(f, blocks.data(), rows, k, c2.data(), s2.data());
    EXPECT_EQ(c2, codes) << quant_format_name(f);
    EXPECT_EQ(s2, scales) << quant_format_name(f);
  }
  // One Q4_0 block by hand: ggml's byte 0 = 0x9a holds element 0 (0xa) and element 16 (0x9).
  std::vector<std::byte> block(18, std::byte{0x88});
  const uint16_t one = f32_to_f16(1.f);
  std::memcpy(block.data(), &one, 2);
  block[2] = std::byte{0x9a};
  std::vector<uint8_t> codes(16), scales(2);
  ggml_blocks_to_codes(QuantFormat::Q4_0, block.data(), 1, 32, codes.data(), scales.data());
  std::vector<float> w(32);
  dequantize_row(QuantFormat::Q4_0, codes.data(), scales.data(), 32, w.data());
  EXPECT_EQ(w[0], 2.f);   // 0xa - 8
  EXPECT_EQ(w[16], 1.f);  // 0x9 - 8
  EXPECT_EQ(w[1], 0.f);
}

class GgufModel : public ::testing::TestWithParam<std::tuple<std::string, QuantFormat>> {};

// export-gguf, then load: the same weights, so the same logits bit for bit, and the same
// tokenizer and chat template.
TEST_P(GgufModel, LoadsAndComputesExactlyWhatItsFolderDoes) {
  const auto [model, f] = GetParam();
  std::string dir = model_dir(model);
  const std::string tag = model + "-" + std::string(quant_format_name(f));
  if (f != QuantFormat::None) {
    QuantizeOptions o;
    o.format = f;
    dir = temp_path(tag);
    quantize_checkpoint(model_dir(model), dir, o);
  }
  const std::string file = temp_path(tag + ".gguf");
  const GgufExportReport rep = export_gguf(dir, file);
  EXPECT_GT(rep.tensors, 0);
  EXPECT_TRUE(is_gguf_model(file));
  test::Runner a(dir), b(file);
  EXPECT_EQ(a.model->config().num_layers, b.model->config().num_layers);
  EXPECT_EQ(a.model->config().eos_token_ids, b.model->config().eos_token_ids);
  EXPECT_EQ(a.model->decode_weight_bytes(), b.model->decode_weight_bytes());
  std::vector<int32_t> toks;
  for (int i = 0; i < 37; ++i) toks.push_back(int32_t((i * 53 + 5) % a.vocab));
  const std::vector<float> la = a.run(0, toks, 0), lb = b.run(0, toks, 0);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << tag << ": logits differ";
  const auto ta = model_tokenizer_json(dir), tb = model_tokenizer_json(file);
  ASSERT_EQ(ta.has_value(), tb.has_value());
  EXPECT_EQ(model_chat_template_text(dir), model_chat_template_text(file));
  fs::remove(file);
  if (f != QuantFormat::None) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, GgufModel,
                         ::testing::Combine(::testing::Values("tiny-llama-f32", "tiny-hybrid-bf16"),
                                            ::testing::Values(QuantFormat::None, QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::MXFP4)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::string(quant_format_name(std::get<1>(info.param)));
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// The bench presets (bench-100m-dense: llama; bench-100m: kimi-linear with MoE) made and
// converted through the CLI as a user would (make-model, quantize, export-gguf): the GGUF file
// computes what its folder does, bit for bit.
TEST(GgufModel, BenchPresetsConvertedByTheCliComputeWhatTheirFoldersDo) {
  for (const char* preset : {"bench-100m-dense", "bench-100m"}) {
    const std::string bf16 = test::preset_dir(preset, 1, "bf16");
    const std::string q4 = temp_path(std::string(preset) + "-q4_0"), file = temp_path(std::string(preset) + ".gguf");
    const std::string cmd = std::string(DS_CLI) + " quantize --model " + bf16 + " --format q4_0 --out " + q4 + " 2>/dev/null && " +
                            DS_CLI + " export-gguf --model " + q4 + " --out " + file + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    test::Runner a(q4, 1, 64), b(file, 1, 64);
    std::vector<int32_t> toks;
    for (int i = 0; i < 24; ++i) toks.push_back(int32_t((i * 7919 + 100) % a.vocab));
    const std::vector<float> la = a.run(0, toks, 0), lb = b.run(0, toks, 0);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << preset << ": logits differ";
    fs::remove(file);
    fs::remove_all(q4);
  }
}

TEST(GgufModelErrors, AnUnsupportedTensorTypeOrArchitectureIsNamed) {
  const std::string file = temp_path("bad.gguf");
  export_gguf(model_dir("tiny-llama-f32"), file);
  const GgufFile g = GgufFile::open(file);
  // Rewrite token_embd's type to Q4_K (12) in place: the loader names the type.
  std::vector<std::byte> b(g.bytes().begin(), g.bytes().end());
  const std::string s(reinterpret_cast<const char*>(b.data()), b.size());
  const size_t at = s.find("token_embd.weight") + std::string("token_embd.weight").size() + 4 + 16;
  b[at] = std::byte{12};
  const std::string f2 = temp_path("q4k.gguf");
  write_bytes(f2, b);
  try {
    WeightStore::open(f2);
    ADD_FAILURE() << "loaded a Q4_K tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
  GgufWriter w;
  w.set_string("general.architecture", "mamba");
  w.write(f2);
  try {
    load_model_config(f2);
    ADD_FAILURE() << "took architecture mamba";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mamba'"), std::string::npos) << e.what();
  }
  fs::remove(file);
  fs::remove(f2);
}

// Runs fn in a child process whose address space may grow by at most `budget` bytes, and
// returns what it threw (a ds::Error's message), "ok" when it returned, or what else happened:
// a loader that sizes something from a count it did not check runs out of the budget.
std::string bounded(const std::function<void()>& fn, size_t budget = size_t(512) << 20) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + budget;
    const rlimit r{limit, limit};
    ::setrlimit(RLIMIT_AS, &r);
    std::string out;
    try {
      fn();
      out = "ok";
    } catch (const Error& e) {
      out = e.what();
    } catch (const std::bad_alloc&) {
      out = "std::bad_alloc: over the memory budget";
    } catch (const std::exception& e) {
      out = std::string("other exception: ") + e.what();
    }
    if (::write(fds[1], out.data(), out.size()) < 0) _exit(3);
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "the child died (signal " + std::to_string(WTERMSIG(status)) + "): " + out;
  return out;
}

// A file exported from a checkpoint folder with one u32 metadata value rewritten.
std::string with_u32(const std::string& model, const std::string& key, uint32_t v, const std::string& tag) {
  const std::string file = temp_path(tag + ".gguf");
  export_gguf(model_dir(model), file);
  std::vector<std::byte> b;
  {
    const GgufFile g = GgufFile::open(file);
    const GgufValue* old = g.find(key);
    EXPECT_TRUE(old && old->type == GgufValueType::U32) << key;
    b.assign(g.bytes().begin(), g.bytes().end());
  }
  b = patched(b, key, 4, {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)});
  write_bytes(file, b);
  return file;
}

// block_count 10^8 once made the loader allocate 2.4 GB of per-layer tables before its first
// missing tensor, and 2^31 - 1 ended in bad_alloc. Every size the config is made of is checked
// against its range (and block_count against the file's tensors) before anything is sized by it;
// the error names the key and the range, and the loader stays within a small memory budget.
TEST(GgufModelErrors, SizesFromTheMetadataAreCheckedBeforeAnythingIsSizedByThem) {
  struct Case {
    std::string model, key;
    uint32_t value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"tiny-llama-f32", "llama.block_count", 100000000, "llama.block_count is 100000000, outside [1, 1024]"},
      {"tiny-llama-f32", "llama.block_count", 2147483647, "llama.block_count is 2147483647, outside [1, 1024]"},
      {"tiny-llama-f32", "llama.block_count", 4294967295u, "llama.block_count is 4294967295, outside [1, 1024]"},
      {"tiny-llama-f32", "llama.block_count", 0, "llama.block_count is 0, outside [1, 1024]"},
      {"tiny-llama-f32", "llama.block_count", 1000, "llama.block_count is 1000, but the file has"},
      {"tiny-llama-f32", "llama.embedding_length", 2147483647, "llama.embedding_length is 2147483647, outside [1, 65536]"},
      {"tiny-llama-f32", "llama.feed_forward_length", 100000000, "llama.feed_forward_length is 100000000, outside [1, 1048576]"},
      {"tiny-llama-f32", "llama.attention.head_count", 100000000, "llama.attention.head_count is 100000000, outside [1, 1024]"},
      {"tiny-llama-f32", "llama.attention.head_count_kv", 5, "llama.attention.head_count_kv is 5, outside [1, 4]"},
      {"tiny-llama-f32", "llama.attention.key_length", 100000, "llama.attention.key_length is 100000, outside [1, 512]"},
      {"tiny-llama-f32", "llama.vocab_size", 2147483647, "llama.vocab_size is 2147483647, outside [1, 16777216]"},
      {"tiny-llama-f32", "llama.context_length", 2147483647, "llama.context_length is 2147483647, outside [0, 16777216]"},
      {"tiny-hybrid-bf16", "kimi-linear.block_count", 100000000, "kimi-linear.block_count is 100000000, outside [1, 1024]"},
      {"tiny-hybrid-bf16", "kimi-linear.block_count", 2147483647, "kimi-linear.block_count is 2147483647, outside [1, 1024]"},
      {"tiny-hybrid-bf16", "kimi-linear.attention.head_count", 100000000, "kimi-linear.attention.head_count is 100000000"},
      {"tiny-hybrid-bf16", "kimi-linear.kda.head_dim", 100000, "kimi-linear.kda.head_dim is 100000, outside [1, 512]"},
      {"tiny-hybrid-bf16", "kimi-linear.vocab_size", 2147483647, "kimi-linear.vocab_size is 2147483647"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string file = with_u32(c.model, c.key, c.value, "sizes-" + std::to_string(i++));
    for (const auto& [what, fn] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"config", [&] { load_model_config(file); }},
             {"weights", [&] { WeightStore::open(file); }},
             {"model", [&] { Model::load(file, 1); }}}) {
      const std::string r = bounded(fn);
      EXPECT_NE(r.find(c.want), std::string::npos) << c.key << " = " << c.value << " (" << what << "): " << r;
      EXPECT_NE(r.find("GGUF " + file), std::string::npos) << r;
    }
    fs::remove(file);
  }
}

// The fuzz corpus's files (the seed and the pathological ones fuzz/make_gguf_pathological.py
// wrote) each load or are refused with a ds::Error naming the file, within the memory budget.
TEST(GgufModelErrors, EveryCorpusFileLoadsOrIsRefusedInSmallMemory) {
  int files = 0, refused = 0;
  for (const auto& e : fs::directory_iterator(std::string(DS_SOURCE_DIR) + "/fuzz/corpus/gguf_header")) {
    const std::string path = e.path().string();
    const std::string r = bounded([&] {
      const GgufFile g = GgufFile::open(path);
      (void)gguf_config_json(g);
      (void)gguf_tokenizer_json(g);
      (void)load_model_config(path);
      (void)WeightStore::open(path);
    });
    ++files;
    if (r == "ok") continue;
    ++refused;
    EXPECT_EQ(r.rfind("GGUF " + path + ": ", 0), 0u) << path << ": " << r;
  }
  EXPECT_GE(files, 15);
  EXPECT_GE(refused, 13);
}

// The header's own counts and lengths: each checked against the bytes the file has left and a
// ceiling before anything is allocated for it; the error names the field and the range.
TEST(GgufFile, CountsAndLengthsPastTheirCeilingAreRefusedNamingTheRange) {
  const std::vector<std::byte> ok = sample().to_bytes();
  std::vector<std::byte> b = ok;
  b[8] = std::byte{0}, b[9] = std::byte{0}, b[10] = std::byte{0}, b[11] = std::byte{0x80};  // 2^31 tensors
  expect_refused(b, "tensor count 2147483648 is impossible");
  b = ok;
  b[16] = std::byte{0}, b[17] = std::byte{0}, b[18] = std::byte{0x10};  // 2^20 metadata entries in a tiny file
  expect_refused(b, "metadata count 1048576 is impossible");
  // An array length past what the file holds, and one the file holds but past the ceiling.
  expect_refused(patched(ok, "x.ints", 8, {0, 0, 0, 2}), "array of 33554432 elements cannot fit");
  {
    const uint64_t n = (uint64_t(1) << 24) + 1;
    std::vector<std::byte> arr(12 + n, std::byte{0});
    const uint32_t u8 = uint32_t(GgufValueType::U8);
    std::memcpy(arr.data(), &u8, 4);
    std::memcpy(arr.data() + 4, &n, 8);
    GgufWriter big;
    big.set_raw("x.bytes", uint32_t(GgufValueType::Array), arr);
    std::vector<std::byte> bb = big.to_bytes();
    expect_refused(bb, "key 'x.bytes': array of 16777217 elements, outside [0, 16777216]");
  }
  // A key and a tensor name longer than their ceilings (and than the file).
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32(std::string(70000, 'k'), 1);
  const std::string p = temp_path("longkey.gguf");
  w.write(p);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "took a 70000-byte key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metadata key at byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is 70000 bytes long, outside [0, 65535]"), std::string::npos) << e.what();
  }
  GgufWriter t;
  std::vector<float> v(32, 1.f);
  t.add_tensor(std::string(5000, 'n'), uint32_t(GgmlType::F32), {32}, std::as_bytes(std::span<const float>(v)));
  t.write(p);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "took a 5000-byte tensor name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor name at byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside [0, 4096]"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

}  // namespace
}  // namespace ds
