// --endpoint chat: text built with the served tokenizer encodes back to the prompt's length.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/chat_text.h"
#include "bench/openai_sender.h"
#include "core/error.h"
#include "tokenizer/bpe_trainer.h"

namespace ds::bench {
namespace {

Tokenizer small_tokenizer() {
  // Plain English-like text: merges learn whole " word" tokens.
  std::string text;
  const char* words[] = {"the", "model", "serves", "agentic", "sessions", "with", "long", "prefixes",
                         "cache", "blocks", "tokens", "every", "turn", "resends", "history", "tools",
                         "repository", "context", "lanes", "recycle", "server", "stream", "events"};
  for (int rep = 0; rep < 40; ++rep)
    for (size_t i = 0; i < std::size(words); ++i) text += std::string(" ") + words[(i * 7 + rep) % std::size(words)];
  return Tokenizer::from_json_text(train_bpe_tokenizer_json({text}, 600, {"<|im_end|>"}), "test");
}

TEST(ChatText, TextEncodesToTheSameTokenCount) {
  const Tokenizer tok = small_tokenizer();
  const ChatText chat(tok);
  ASSERT_GE(chat.word_count(), 16);
  std::vector<int32_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back((i * 13 + 5) % chat.word_count());
  const std::string text = chat.text(ids);
  EXPECT_EQ(tok.encode(text, false).size(), ids.size());
  // A shared id prefix gives a shared text prefix: the server's cache sees the same reuse.
  std::vector<int32_t> longer = ids;
  longer.push_back(1);
  EXPECT_EQ(chat.text(longer).compare(0, text.size(), text), 0);

  SenderConfig cfg;
  cfg.endpoint = Endpoint::chat;
  cfg.model = "m";
  cfg.to_text = [&](const std::vector<int32_t>& p) { return chat.text(p); };
  const auto body = nlohmann::json::parse(request_body(cfg, ids, 7));
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], text);
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_TRUE(body["ignore_eos"].get<bool>());
  EXPECT_TRUE(body["stream_options"]["include_usage"].get<bool>());
}

TEST(ChatText, RefusesAVocabularyWithoutWords) {
  const Tokenizer tok = Tokenizer::from_json_text(train_bpe_tokenizer_json({"0123456789"}, 260, {}), "digits");
  EXPECT_THROW(ChatText{tok}, Error);
}

}  // namespace
}  // namespace ds::bench
