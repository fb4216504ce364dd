// Models read from GGUF files: the ones written by `export-gguf` load and compute exactly what
// their checkpoint folders do (the weights are the same numbers), and a file's metadata or
// tensors that the reader cannot take are refused by name within a small memory budget. The
// container and ggml's block layouts are tests/checkpoint/gguf_file_test.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_tokenizer.h"
#include "checkpoint/gguf_writer.h"
#include "convert/gguf_export.h"
#include "convert/quantize.h"
#include "core/error.h"
#include "kernels/quant_formats.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/model_files.h"
#include "model_util.h"
#include "../support/scratch_files.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& tag) { return test::scratch_path("ds-gguf", tag); }

using test::write_bytes;

std::string model_dir(const std::string& name) { return std::string(DS_SOURCE_DIR) + "/tests/data/models/" + name; }

// Overwrites bytes at the offset where `needle` (a key or name) ends.
std::vector<std::byte> patched(std::vector<std::byte> b, const std::string& needle, size_t skip, std::vector<uint8_t> bytes) {
  const std::string s(reinterpret_cast<const char*>(b.data()), b.size());
  const size_t at = s.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  for (size_t i = 0; i < bytes.size(); ++i) b[at + needle.size() + skip + i] = std::byte{bytes[i]};
  return b;
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
    open_model_weights(f2);
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
             {"weights", [&] { open_model_weights(file); }},
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
      (void)open_model_weights(path);
    });
    ++files;
    if (r == "ok") continue;
    ++refused;
    EXPECT_EQ(r.rfind("GGUF " + path + ": ", 0), 0u) << path << ": " << r;
  }
  EXPECT_GE(files, 15);
  EXPECT_GE(refused, 13);
}

}  // namespace
}  // namespace ds
