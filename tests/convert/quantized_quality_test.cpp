// Quality of the bundled deltacoder under each weight format and KV cache dtype: bits per byte
// on held-out Python (the files tools/train/corpus.json held out of training), the measure
// tools/train/export.py reports in metrics.json. The figures are printed for the record; the
// test holds q8_0 within 1% of the checkpoint's own bf16 weights, the 4-bit formats to their
// measured values plus a margin (and their loss against bf16 to the measured one plus half a
// point), and every format better than the unigram baseline in metrics.json.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/quantize.h"
#include "kernels/quant_formats.h"
#include "../model/model_util.h"
#include "../support/missing_dependency.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

namespace fs = std::filesystem;
const std::string kDeltacoder = std::string(DS_SOURCE_DIR) + "/models/deltacoder";
constexpr size_t kHeldOutBytes = 24000;  // ~7k tokens: a few seconds per format on 2 cores
constexpr int kWindow = 256;             // export.py's eval window

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The held-out text: the first kHeldOutBytes of the held-out files of tools/train/corpus.json,
// concatenated in their listed order, read from where the corpus came from: Debian 12's Python
// standard library (/usr/lib/python3.11, package libpython3.11-minimal, which scripts/setup's
// python3 packages bring). Not copied into the repository: it is another project's text. The
// first held-out file, ast.py, is longer than the cut. Empty when a file is missing.
std::string held_out_text() {
  const auto corpus = nlohmann::json::parse(read_file(std::string(DS_SOURCE_DIR) + "/tools/train/corpus.json"));
  std::string text;
  for (const auto& rel : corpus["heldout_paths"]) {
    const fs::path p = fs::path(corpus["root"].get<std::string>()) / rel.get<std::string>();
    if (!fs::exists(p)) return "";
    text += read_file(p);
    if (text.size() >= kHeldOutBytes) break;
  }
  return text.size() >= kHeldOutBytes ? text.substr(0, kHeldOutBytes) : std::string();
}

// sum(-log2 p(token)) / sum(bytes of token) over windows of kWindow tokens (each predicts its
// tokens after the first), as export.py scores.
double bits_per_byte(const std::string& model_dir, KvDtype kv, const Tokenizer& tok, const std::vector<int32_t>& ids) {
  test::Runner r(model_dir, 1, kWindow, 2, kWindow / 64, kv);
  double bits = 0, bytes = 0;
  for (size_t w = 0; w + 2 <= ids.size(); w += kWindow) {
    const std::vector<int32_t> win(ids.begin() + long(w), ids.begin() + long(std::min(ids.size(), w + kWindow)));
    const std::vector<float> logits = r.run(0, win, 0);
    for (size_t i = 0; i + 1 < win.size(); ++i) {
      const float* l = logits.data() + i * size_t(r.vocab);
      double m = -INFINITY, s = 0;
      for (int v = 0; v < r.vocab; ++v) m = std::max(m, double(l[v]));
      for (int v = 0; v < r.vocab; ++v) s += std::exp(double(l[v]) - m);
      bits += (m + std::log(s) - double(l[win[i + 1]])) / std::log(2.0);
      bytes += double(tok.token_bytes(win[i + 1]).size());
    }
  }
  return bits / bytes;
}

TEST(QuantizedQuality, HeldOutBitsPerByteOfEachFormatAndKvDtype) {
  const std::string text = held_out_text();
  // scripts/setup installs Python: missing under CI, the check silently did not happen, which CI
  // must not pass as a skip.
  DS_REQUIRE_DEPENDENCY(!text.empty(), "the held-out files of tools/train/corpus.json (Debian 12's /usr/lib/python3.11) are missing");
  const Tokenizer tok = Tokenizer::load(kDeltacoder + "/tokenizer.json");
  const std::vector<int32_t> ids = tok.encode(text, /*allow_special=*/false);
  const double unigram = nlohmann::json::parse(read_file(kDeltacoder + "/metrics.json"))["bits_per_byte"]["unigram"];

  const double bf16 = bits_per_byte(kDeltacoder, KvDtype::F32, tok, ids);
  std::printf("deltacoder held-out bits/byte (%zu tokens, %zu bytes): bf16 %.4f\n", ids.size(), text.size(), bf16);
  for (QuantFormat f : {QuantFormat::Q8_0, QuantFormat::MXFP4, QuantFormat::Q4_0}) {
    const std::string dir = (fs::temp_directory_path() / ("ds-quality-" + std::to_string(::getpid()) + "-" +
                                                          std::string(quant_format_name(f))))
                                .string();
    QuantizeOptions o;
    o.format = f;
    quantize_checkpoint(kDeltacoder, dir, o);
    const double b = bits_per_byte(dir, KvDtype::F32, tok, ids);
    std::printf("  %-5s %.4f (%+.2f%% vs bf16)\n", std::string(quant_format_name(f)).c_str(), b, 100 * (b / bf16 - 1));
    if (f == QuantFormat::Q8_0) {
      EXPECT_LT(std::fabs(b / bf16 - 1), 0.01) << "q8_0 must stay within 1% of bf16";
    }
    EXPECT_LT(b, unigram) << quant_format_name(f) << " no longer models the text";
    if (f != QuantFormat::Q8_0) {
      // Measured (Release, AVX-512; the quantized kernels are bit-identical on every ISA):
      // bf16 1.2730, q4_0 1.2758 (+0.22%), mxfp4 1.2801 (+0.56%). Held to the measured value plus
      // 15%, and, tighter, to the measured loss against this run's own bf16 plus half a point
      // (a shared change of the numerics cancels there): codes truncated instead of rounded
      // cost q4_0 +1.61%, which the 15% alone would let pass.
      const double measured = f == QuantFormat::Q4_0 ? 1.2758 : 1.2801, loss = f == QuantFormat::Q4_0 ? 0.0022 : 0.0056;
      EXPECT_LT(b, measured * 1.15) << quant_format_name(f) << " (measured " << measured << ")";
      EXPECT_LT(b / bf16 - 1, loss + 0.005) << quant_format_name(f) << " loses more against bf16 than measured (" << loss << ")";
    }
    fs::remove_all(dir);
  }
  for (KvDtype kv : {KvDtype::BF16, KvDtype::Fp8E4M3}) {
    const double b = bits_per_byte(kDeltacoder, kv, tok, ids);
    std::printf("  bf16 weights, %s KV: %.4f (%+.2f%% vs f32 KV)\n", std::string(kv_dtype_name(kv)).c_str(), b, 100 * (b / bf16 - 1));
    EXPECT_LT(std::fabs(b / bf16 - 1), 0.01) << kv_dtype_name(kv) << " KV";
  }
}

}  // namespace
}  // namespace ds
