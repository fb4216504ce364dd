// Malformed or unsupported tokenizer.json files are refused with a ds::Error that names the
// file and the field, never a crash.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "core/error.h"
#include "test_util.h"

namespace ds {
namespace {

using nlohmann::json;

// Expects from_json_text(j) to throw a ds::Error whose message holds every one of `parts`.
void expect_error(const std::string& text, const std::vector<std::string>& parts) {
  try {
    (void)Tokenizer::from_json_text(text, "bad.json");
    ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

void expect_error(const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
  json j = test::tiny_json({});
  edit(j);
  expect_error(j.dump(), parts);
}

TEST(LoaderErrors, NotJson) {
  expect_error("{\"model\": ", {"not valid JSON"});
  expect_error("", {"not valid JSON"});
  expect_error("[1, 2]", {"object"});
}

// Nesting deeper than any tokenizer needs is refused while parsing, naming the limit: an error
// message that dumps a field once recursed through all of its levels.
TEST(LoaderErrors, DeepNestingIsRefusedNamingTheLimit) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  expect_error(deep, {"nests deeper than 256 levels"});
  json j = test::tiny_json({});
  const std::string text = j.dump();
  expect_error("{\"normalizer\": " + deep + ", " + text.substr(1), {"nests deeper than 256 levels"});
  expect_error(text.substr(0, text.size() - 1) + ", \"x\": " + std::string(500000, '['), {"nests deeper than 256 levels"});
}

// Tables are sized by the highest id: a three-token file with an id of 2^24 - 1 once cost
// ~700 MB of empty entries. The id span is bounded by the tokens the file defines.
TEST(LoaderErrors, IdsFarPastTheDefinedTokensAreRefused) {
  expect_error([](json& j) { j["added_tokens"].push_back({{"id", 16777215}, {"content", "<|far|>"}, {"special", true}}); },
               {"model.vocab", "token ids reach 16777215", "[0, "});
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = 10000000; }, {"model.vocab", "token ids reach 10000000"});
  // Holes a real vocabulary has (padding, reserved ids) are fine.
  json j = test::tiny_json({});
  j["added_tokens"].push_back({{"id", 60000}, {"content", "<|reserved|>"}, {"special", true}});
  EXPECT_EQ(Tokenizer::from_json_text(j.dump(), "ok.json").token_id("<|reserved|>"), 60000);
}

TEST(LoaderErrors, UnsupportedTypesNameTheField) {
  expect_error([](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "WordPiece", "BPE"});
  expect_error([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer", "NFC"});
  expect_error([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, {"pre_tokenizer.type", "Metaspace"});
  expect_error([](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "ByteLevel"});
  expect_error([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type", "WordPiece"});
  expect_error([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, {"post_processor", "BertProcessing"});
  expect_error([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"});
  expect_error([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"continuing_subword_prefix"});
  expect_error([](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
                   {"type": "ByteLevel"}, {"type": "Digits"}]})"); },
               {"pretokenizers[1]", "ByteLevel must come last"});
  expect_error([](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "Isolated"}]})"); },
               {"pre_tokenizer", "no ByteLevel"});
}

TEST(LoaderErrors, BadPieces) {
  expect_error([](json& j) { j.erase("model"); }, {"model"});
  expect_error([](json& j) { j["model"].erase("vocab"); }, {"model.vocab"});
  expect_error([](json& j) { j["model"].erase("merges"); }, {"model.merges"});
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = -4; }, {"model.vocab", "zz"});
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = "seven"; }, {"model.vocab", "zz"});
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = 1u << 30; }, {"model.vocab"});
  expect_error([](json& j) { j["model"]["vocab"]["zz"] = 5; }, {"id 5"});
  expect_error([](json& j) { j["model"]["vocab"].erase("A"); }, {"byte 0x41"});
  expect_error([](json& j) { j["model"]["merges"] = {"a b c"}; }, {"model.merges[0]"});
  expect_error([](json& j) { j["model"]["merges"] = {"ab"}; }, {"model.merges[0]"});
  expect_error([](json& j) { j["model"]["merges"] = {"a b"}; }, {"model.merges[0]", "'ab' is not in model.vocab"});
  expect_error([](json& j) { j["model"]["merges"] = {"a NOPE"}; }, {"model.merges[0]", "NOPE"});
  expect_error([](json& j) { j["model"]["merges"] = {json::array({"a"})}; }, {"model.merges[0]"});
  expect_error([](json& j) { j["model"]["merges"] = {42}; }, {"model.merges[0]"});
  expect_error([](json& j) { j["added_tokens"] = {{{"id", "x"}, {"content", "<s>"}}}; }, {"added_tokens[0].id"});
  expect_error([](json& j) { j["added_tokens"] = {{{"id", 300}}}; }, {"added_tokens[0].content"});
  expect_error([](json& j) { j["added_tokens"] = {{{"id", 300}, {"content", ""}}}; }, {"added_tokens[0].content"});
  expect_error([](json& j) { j["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", "yes"}}}; },
               {"added_tokens[0].special"});
  expect_error([](json& j) { j["added_tokens"] = 7; }, {"added_tokens"});
  expect_error([](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "(open"}, "behavior": "Isolated"},
                   {"type": "ByteLevel"}]})"); },
               {"pretokenizers[0].pattern", "(open"});
  expect_error([](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Sideways"},
                   {"type": "ByteLevel"}]})"); },
               {"behavior", "Sideways"});
}

// Corrupted copies of a trained tokenizer.json. Whatever comes in, the loader either refuses it
// with a ds::Error that names the file and where the problem is (a field path, or the line and
// column of a JSON syntax error), or accepts it and then encodes losslessly; nothing crashes or
// throws anything else. Where a corruption is known to be fatal (or harmless), that outcome is
// required, so a loader that accepted garbage, or refused a valid file, fails here.
std::string refusal(const std::string& text) {
  try {
    (void)Tokenizer::from_json_text(text, "fuzz.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message names the file, then a location: a field path, or a JSON parse position.
void expect_located(const std::string& msg, const std::string& what) {
  EXPECT_EQ(msg.rfind("fuzz.json: ", 0), 0u) << what << ": " << msg;
  const bool parse_position = msg.find("not valid JSON") != std::string::npos && msg.find(" column ") != std::string::npos;
  bool field = false;
  for (const char* f : {"model", "pre_tokenizer", "decoder", "added_tokens", "normalizer", "post_processor"})
    field = field || msg.rfind(std::string("fuzz.json: ") + f, 0) == 0;
  EXPECT_TRUE(parse_position || field) << what << ": no location in: " << msg;
}

void expect_round_trips(const std::string& text, const std::string& what) {
  const Tokenizer tok = Tokenizer::from_json_text(text, "fuzz.json");
  std::mt19937 rng(1);
  std::vector<std::string> samples = test::synthetic_corpus(3, 99);
  for (int i = 0; i < 3; ++i) samples.push_back(test::random_utf8(rng, 60));
  for (const auto& s : samples) ASSERT_EQ(tok.decode(tok.encode(s, false)), s) << what;
}

TEST(LoaderErrors, CorruptedFilesAreRefusedWithALocationOrLoadLossless) {
  const std::string good = test::trained_json();
  const json base = json::parse(good);
  std::mt19937 rng(5);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  // Spellings of merge results (left + right of some merge), and of byte tokens.
  std::vector<std::string> merge_results;
  for (const auto& m : base["model"]["merges"]) {
    const std::string t = m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    merge_results.push_back(t.substr(0, t.find(' ')) + t.substr(t.find(' ') + 1));
  }
  ASSERT_FALSE(merge_results.empty());
  const char* top_keys[] = {"model", "pre_tokenizer", "decoder", "added_tokens", "normalizer", "post_processor"};
  const char* model_keys[] = {"vocab", "merges", "type", "ignore_merges", "dropout"};
  const json wrong_types[] = {json(17), json("x"), json::array({1, "a", nullptr}), json(3.5), json::object({{"a", "b"}})};
  for (int i = 0; i < 300; ++i) {
    const std::string what = "case " + std::to_string(i);
    json j = base;
    switch (i % 6) {
      case 0: {  // truncated: never valid JSON, refused with the parse position
        std::string s = good;
        s.resize(pick(s.size()));
        const std::string msg = refusal(s);
        ASSERT_NE(msg, "") << what << ": a truncated file was accepted";
        EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
        expect_located(msg, what);
        continue;
      }
      case 1: {  // one flipped byte: anything may happen, but only the two allowed outcomes
        std::string s = good;
        s[pick(s.size())] ^= 0x21;
        const std::string msg = refusal(s);
        if (msg.empty()) {
          expect_round_trips(s, what + " (flipped byte)");
        } else {
          expect_located(msg, what);
        }
        continue;
      }
      case 2: {  // a top-level section of the wrong JSON type: refused, naming the section
        const std::string key = top_keys[(i / 6) % 6];
        j[key] = wrong_types[(i / 36) % 3];
        const std::string msg = refusal(j.dump());
        ASSERT_NE(msg, "") << what << ": " << key << " = " << j[key].dump() << " was accepted";
        EXPECT_EQ(msg.rfind("fuzz.json: " + key, 0), 0u) << msg;
        continue;
      }
      case 3: {  // a model field of the wrong type: refused, naming model.<field>
        const std::string key = model_keys[(i / 6) % 5];
        const json& v = wrong_types[(i / 30) % 5];
        j["model"][key] = v;
        const std::string msg = refusal(j.dump());
        ASSERT_NE(msg, "") << what << ": model." << key << " = " << v.dump() << " was accepted";
        EXPECT_EQ(msg.rfind("fuzz.json: model." + key, 0), 0u) << msg;
        continue;
      }
      case 4: {  // fatal edits of the vocab: refused, naming the field and the culprit
        auto& vocab = j["model"]["vocab"];
        std::string want_field = "model.vocab", want_detail;
        switch ((i / 6) % 3) {
          case 0: {  // two tokens share an id
            auto x = std::next(vocab.begin(), std::ptrdiff_t(pick(vocab.size())));
            auto y = std::next(vocab.begin(), std::ptrdiff_t(pick(vocab.size())));
            if (x == y) y = std::next(x) == vocab.end() ? vocab.begin() : std::next(x);
            y.value() = x.value();
            want_detail = "id " + std::to_string(x.value().get<int>());
            break;
          }
          case 1: {  // a byte token missing
            const int b = int(pick(256));
            vocab.erase(byte_level::byte_strings()[b]);
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02X", b);
            want_detail = std::string("byte ") + hex;
            break;
          }
          default: {  // a merge's result respelt: that merge now names a token that is not there
            const std::string k = merge_results[pick(merge_results.size())];
            vocab[k + "zz"] = vocab[k];
            vocab.erase(k);
            want_field = "model.merges[";
            want_detail = "'" + k + "' is not in model.vocab";
          }
        }
        const std::string msg = refusal(j.dump());
        ASSERT_NE(msg, "") << what << ": accepted, expected an error about " << want_detail;
        EXPECT_EQ(msg.rfind("fuzz.json: " + want_field, 0), 0u) << msg;
        EXPECT_NE(msg.find(want_detail), std::string::npos) << msg;
        continue;
      }
      default: {  // harmless edits: accepted, and still lossless
        auto& vocab = j["model"]["vocab"];
        auto& merges = j["model"]["merges"];
        switch ((i / 6) % 3) {
          case 0:  // the last merges dropped: fewer merges is still a complete byte-level BPE
            merges.erase(merges.end() - std::ptrdiff_t(1 + pick(50)), merges.end());
            break;
          case 1: {  // two ids swapped
            auto a = std::next(vocab.begin(), std::ptrdiff_t(pick(vocab.size())));
            auto b = std::next(vocab.begin(), std::ptrdiff_t(pick(vocab.size())));
            std::swap(a.value(), b.value());
            break;
          }
          default:  // an extra token past the last id, which no merge produces
            vocab["\u0120unused" + std::to_string(i)] = int(vocab.size());
        }
        const std::string s = j.dump();
        EXPECT_EQ(refusal(s), "") << what;
        expect_round_trips(s, what);
      }
    }
  }
}

}  // namespace
}  // namespace ds
