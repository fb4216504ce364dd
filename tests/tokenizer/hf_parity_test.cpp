// Ids must equal what the Hugging Face `tokenizers` library gives for the same tokenizer.json.
// data/hf_parity/cases.json holds its output (see make_expected.js there) for a tokenizer this
// project's trainer wrote, and for variants of it using other pre-tokenizer layouts, merges as
// pairs and ignore_merges.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

using nlohmann::json;

json read_json(const std::string& rel) {
  const std::string path = std::string(DS_SOURCE_DIR) + "/tests/tokenizer/data/hf_parity/" + rel;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

json variant_of(json base, const json& v) {
  if (v.contains("pre_tokenizer")) base["pre_tokenizer"] = v["pre_tokenizer"];
  if (v.value("merges_as_pairs", false)) {
    for (auto& m : base["model"]["merges"]) {
      const std::string s = m.get<std::string>();
      const auto sp = s.find(' ');
      m = json::array({s.substr(0, sp), s.substr(sp + 1)});
    }
  }
  if (v.value("ignore_merges", false)) base["model"]["ignore_merges"] = true;
  return base;
}

TEST(HfParity, IdsMatchTheReferenceLibrary) {
  const json base = read_json("tokenizer.json");
  const json cases = read_json("cases.json");
  const auto& docs = cases["docs"];
  ASSERT_GT(docs.size(), 100u);
  for (const auto& [name, v] : cases["variants"].items()) {
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::from_json_text(variant_of(base, v).dump(), name);
    const auto& expected = cases["expected"][name];
    ASSERT_EQ(expected.size(), docs.size());
    int mismatches = 0;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      const std::string doc = docs[i].get<std::string>();
      const auto want = expected[i].get<std::vector<int32_t>>();
      const auto got = tok.encode(doc);
      if (got != want && ++mismatches <= 3) {
        ADD_FAILURE() << "doc " << i << ": " << json(doc).dump() << "\n got  " << json(got).dump() << "\n want "
                      << json(want).dump();
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace
}  // namespace ds
