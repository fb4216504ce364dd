// The tokenizer a GGUF file carries (tokenizer.ggml.*, checkpoint/gguf_tokenizer.h) encodes every
// parity case to the same ids as the tokenizer.json it came from: for the parity tokenizer
// against the Hugging Face `tokenizers` library's own ids (tests/tokenizer/data/hf_parity,
// its as_trained variant: the one layout GGUF can name), and for the bundled deltacoder
// exported through export-gguf's path against its tokenizer.json, as the server loads each.
// A vocabulary entry, a merge, a special token or the split regex lost on the way changes ids.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_tokenizer.h"
#include "checkpoint/gguf_writer.h"
#include "convert/gguf_export.h"
#include "core/error.h"
#include "model/model_files.h"
#include "tokenizer/tokenizer.h"
#include "../support/scratch_files.h"

namespace ds {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string kParity = std::string(DS_SOURCE_DIR) + "/tests/tokenizer/data/hf_parity/";

std::string temp_path(const std::string& tag) { return test::scratch_path("ds-gguf-tok", tag); }

// Counts documents whose ids differ, reporting the first three.
int mismatches(const Tokenizer& tok, const json& docs, const std::function<std::vector<int32_t>(size_t)>& want) {
  int bad = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string doc = docs[i].get<std::string>();
    const std::vector<int32_t> got = tok.encode(doc), w = want(i);
    if (got != w && ++bad <= 3)
      ADD_FAILURE() << "doc " << i << ": " << json(doc).dump() << "\n gguf " << json(got).dump() << "\n want " << json(w).dump();
  }
  return bad;
}

TEST(GgufTokenizerParity, TheParityTokenizerThroughGgufGivesTheReferenceLibrarysIds) {
  const std::string text = read_text(kParity + "tokenizer.json");
  const json cases = json::parse(read_text(kParity + "cases.json"));
  ASSERT_TRUE(cases["variants"]["as_trained"].empty()) << "as_trained must be tokenizer.json itself";
  const json& docs = cases["docs"];
  ASSERT_GT(docs.size(), 100u);
  // Written as export-gguf writes a tokenizer (ids past its own 1000 become unused entries).
  GgufWriter w;
  write_gguf_tokenizer(text, "hf_parity/tokenizer.json", 1024, w);
  const std::string path = temp_path("parity.gguf");
  w.write(path);
  const GgufFile g = GgufFile::open(path);
  const std::optional<std::string> back = gguf_tokenizer_json(g);
  ASSERT_TRUE(back.has_value());
  const Tokenizer tok = Tokenizer::from_json_text(*back, path);
  const json& expected = cases["expected"]["as_trained"];
  ASSERT_EQ(expected.size(), docs.size());
  EXPECT_EQ(mismatches(tok, docs, [&](size_t i) { return expected[i].get<std::vector<int32_t>>(); }), 0);
  fs::remove(path);
}

// The other parity variants use layouts GGUF has no name for (a prefix space, other split
// regexes and behaviours, ignore_merges): each must be refused when written, or, if written,
// still give the reference ids; never written as a tokenizer that encodes differently.
TEST(GgufTokenizerParity, EveryOtherVariantIsRefusedOrEncodesAlike) {
  const json base = json::parse(read_text(kParity + "tokenizer.json"));
  const json cases = json::parse(read_text(kParity + "cases.json"));
  const json& docs = cases["docs"];
  for (const auto& [name, v] : cases["variants"].items()) {
    if (name == "as_trained") continue;
    SCOPED_TRACE(name);
    json t = base;
    if (v.contains("pre_tokenizer")) t["pre_tokenizer"] = v["pre_tokenizer"];
    if (v.value("ignore_merges", false)) t["model"]["ignore_merges"] = true;
    if (v.value("merges_as_pairs", false))
      for (auto& m : t["model"]["merges"]) {
        const std::string p = m.get<std::string>();
        m = json::array({p.substr(0, p.find(' ')), p.substr(p.find(' ') + 1)});
      }
    GgufWriter w;
    try {
      write_gguf_tokenizer(t.dump(), name, 1024, w);
    } catch (const Error&) {
      continue;  // refused, naming what GGUF cannot carry
    }
    const std::string path = temp_path(name + ".gguf");
    w.write(path);
    const GgufFile g = GgufFile::open(path);
    const Tokenizer tok = Tokenizer::from_json_text(*gguf_tokenizer_json(g), path);
    const json& expected = cases["expected"][name];
    EXPECT_EQ(mismatches(tok, docs, [&](size_t i) { return expected[i].get<std::vector<int32_t>>(); }), 0)
        << name << " was written to GGUF but encodes differently";
    fs::remove(path);
  }
}

TEST(GgufTokenizerParity, DeltacoderExportedToGgufEncodesLikeItsTokenizerJson) {
  const std::string dir = std::string(DS_SOURCE_DIR) + "/models/deltacoder";
  const std::string path = temp_path("deltacoder.gguf");
  export_gguf(dir, path);
  const auto from_gguf = model_tokenizer_json(path);
  ASSERT_TRUE(from_gguf.has_value());
  const Tokenizer gguf = Tokenizer::from_json_text(from_gguf->json, from_gguf->where);
  const Tokenizer folder = Tokenizer::load(dir + "/tokenizer.json");
  json docs = json::parse(read_text(kParity + "cases.json"))["docs"];
  // The chat markup the server renders, special tokens and all.
  docs.push_back("<|im_start|>user\ndef f(x):\n    return x<|im_end|>\n<|im_start|>assistant\n");
  docs.push_back("<|endoftext|>import os\n<|endoftext|>");
  EXPECT_EQ(mismatches(gguf, docs, [&](size_t i) { return folder.encode(docs[i].get<std::string>()); }), 0);
  fs::remove(path);
}

}  // namespace
}  // namespace ds
