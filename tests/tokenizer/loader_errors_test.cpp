// Malformed or unsupported tokenizer.json files are refused with a ds::Error that names the
// file and the field, never a crash.
#include <gtest/gtest.h>

#include <functional>

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

TEST(LoaderErrors, RandomCorruptionNeverCrashes) {
  const std::string good = test::trained_json();
  std::mt19937 rng(5);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string s = good;
    switch (i % 4) {
      case 0:  // truncation
        s.resize(std::uniform_int_distribution<std::size_t>(0, s.size() - 1)(rng));
        break;
      case 1:  // flipped bytes
        for (int k = 0; k < 5; ++k) s[std::uniform_int_distribution<std::size_t>(0, s.size() - 1)(rng)] ^= 0x21;
        break;
      case 2: {  // a value swapped for another type
        json j = json::parse(good);
        const char* keys[] = {"model", "pre_tokenizer", "decoder", "added_tokens", "normalizer", "post_processor"};
        j[keys[i % 6]] = i % 3 == 0 ? json(17) : i % 3 == 1 ? json("x") : json::array({1, "a", nullptr});
        s = j.dump();
        break;
      }
      default: {  // a model field swapped
        json j = json::parse(good);
        const char* keys[] = {"vocab", "merges", "type", "ignore_merges", "dropout"};
        j["model"][keys[i % 5]] = i % 2 ? json(3.5) : json::object({{"a", "b"}});
        s = j.dump();
      }
    }
    try {
      (void)Tokenizer::from_json_text(s, "fuzz");
      ++accepted;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_EQ(accepted + refused, 300);
  EXPECT_GT(refused, 200);
}

}  // namespace
}  // namespace ds
