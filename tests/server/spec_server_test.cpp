// Speculative decoding seen from the API, on the bundled deltacoder and its tokenizer, under
// every drafter (a draft model, suffix drafting, the parallel drafter, auto draft length): a
// round commits several tokens at once, which the server reads as one batch, so logprobs, stop
// strings met inside a round and SSE chunking are where it could part from plain decoding. At
// temperature 0 each response equals the plain server's bit for bit (text, logprobs with their
// alternatives, finish reason, completion tokens), and its stream concatenates to the whole
// response. The engine-level half (stop tokens, processed requests) is in
// tests/spec_decode/spec_request_features_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "server_harness.h"
#include "spec_decode/spec_options.h"

namespace ds {
namespace {

using namespace testing;

std::string model_dir(const char* name) { return std::string(DS_SOURCE_DIR) + "/models/" + name; }

// An in-process server over the real model, speculating with `spec` (none: plain decoding).
struct SpecServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;

  explicit SpecServer(const SpecOptions& spec) {
    EngineConfig c;
    c.max_num_seqs = 4;
    // A prompt prefills whole in its first step whatever runs beside it: a prompt split at other
    // places rounds its logits otherwise, and logprobs are compared bit for bit.
    c.max_num_batched_tokens = 256;
    c.max_model_len = 1024;
    c.num_kv_blocks = 32;
    c.threads = 2;
    // Off, so every request computes its prompt the same way (a resumed prefix is restored
    // state, not the same arithmetic).
    c.prefix.enabled = false;
    c.spec = spec;
    engine = std::make_unique<Engine>(Model::load(model_dir("deltacoder"), c.threads), c);
    server::ServerOptions o;
    o.served_model_names = {"deltacoder"};
    o.model_dir = model_dir("deltacoder");
    o.host = "127.0.0.1";
    o.port = 0;
    o.http_threads = 8;
    http = std::make_unique<server::HttpServer>(*engine, Tokenizer::load(model_dir("deltacoder") + "/tokenizer.json"), o);
    port = http->bind();
    http->start();
  }
  ~SpecServer() {
    http->stop();
    engine->stop();
  }
};

SpecOptions model_draft(const char* draft, int k) {
  SpecOptions s;
  s.draft_model = model_dir(draft);
  s.num_speculative_tokens = k;
  return s;
}

SpecOptions suffix_draft(int k) {
  SpecOptions s;
  s.source = DraftSource::Suffix;
  s.num_speculative_tokens = k;
  return s;
}

// Auto with draft rows priced free, so it drafts whatever this machine's timings.
SpecOptions with_auto(SpecOptions s, int k) {
  s.num_speculative_tokens = k;
  s.auto_k = true;
  s.test_row_cost_scale = 0;
  return s;
}

struct Drafter {
  const char* name;
  SpecOptions spec;
};

// ---- the requests

const char* kPrompt = "import os\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of the file at path.\"\"\"\n";

json completion(int max_tokens) {
  return {{"model", "deltacoder"}, {"prompt", kPrompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"logprobs", 3},         {"ignore_eos", true}};
}

json chat(int max_tokens) {
  return {{"model", "deltacoder"},
          {"messages", json::array({{{"role", "user"}, {"content", "Write a function that reverses a list."}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"logprobs", true},
          {"top_logprobs", 3}};
}

// What a response says, whole or streamed, in one shape.
struct Said {
  std::string text, finish;
  json logprobs;  // completions: tokens, token_logprobs, top_logprobs, text_offset; chat: content
  int completion_tokens = -1;
  int drafted = 0;
};

bool is_chat(const std::string& path) { return path == "/v1/chat/completions"; }

Said whole(int port, const std::string& path, json body) {
  const HttpResult r = post(port, path, body);
  EXPECT_EQ(r.status, 200) << r.raw;
  Said s;
  if (r.status != 200) return s;
  const json& c = r.body["choices"][0];
  s.text = is_chat(path) ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
  s.finish = c["finish_reason"].get<std::string>();
  s.logprobs = c["logprobs"];
  s.completion_tokens = r.body["usage"]["completion_tokens"].get<int>();
  const json& details = r.body["usage"].value("completion_tokens_details", json::object());
  s.drafted = details.value("accepted_prediction_tokens", 0) + details.value("rejected_prediction_tokens", 0);
  return s;
}

Said streamed(int port, const std::string& path, json body) {
  body["stream_options"] = {{"include_usage", true}};
  const SseResult r = stream(port, path, body);
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(r.done) << "no [DONE]: " << r.error;
  Said s;
  s.text = r.content;
  s.finish = r.finish_reason;
  // Each chunk's logprobs cover its own tokens: their lists, joined, are the whole response's.
  s.logprobs = is_chat(path) ? json{{"content", json::array()}}
                             : json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                                    {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (const json& ev : r.events) {
    if (!ev.contains("choices") || ev["choices"].empty()) continue;
    const json& lp = ev["choices"][0].value("logprobs", json());
    if (lp.is_null()) continue;
    for (auto& [key, list] : s.logprobs.items())
      for (const json& e : lp.at(key)) list.push_back(e);
  }
  if (r.usage.is_object()) s.completion_tokens = r.usage["completion_tokens"].get<int>();
  return s;
}

// Where two logprobs objects part, in a line (the whole objects run to kilobytes): the first
// field and index that differ, or the lengths.
std::string first_difference(const json& got, const json& want) {
  for (auto& [key, list] : want.items()) {
    const json& other = got.value(key, json::array());
    for (size_t i = 0; i < std::min(list.size(), other.size()); ++i)
      if (other[i] != list[i]) return key + "[" + std::to_string(i) + "]: " + other[i].dump() + " vs " + list[i].dump();
    if (other.size() != list.size())
      return key + ": " + std::to_string(other.size()) + " entries vs " + std::to_string(list.size());
  }
  return got == want ? "" : "other fields: " + got.dump();
}

void expect_same(const Said& got, const Said& want, const std::string& what) {
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.finish, want.finish) << what;
  EXPECT_EQ(got.completion_tokens, want.completion_tokens) << what;
  // Floats compared exactly: the same doubles print the same.
  EXPECT_EQ(first_difference(got.logprobs, want.logprobs), "") << what << ": logprobs differ";
}

struct Case {
  std::string name, path;
  json body;
};

// A completion with logprobs, the same with each of five stop strings taken from its text at
// each sixth (so some stop inside a round, whichever the drafter's rounds), and a chat turn with
// top logprobs: each equal to the plain server's answer, whole and streamed, under each drafter.
void check_against_plain(const std::vector<Drafter>& drafters) {
  std::vector<Case> cases;
  std::vector<Said> want;
  {
    SpecServer plain{SpecOptions{}};
    const Said full = whole(plain.port, "/v1/completions", completion(48));
    ASSERT_EQ(full.finish, "length");
    ASSERT_EQ(full.logprobs["tokens"].size(), 48u);
    cases.push_back({"completion, logprobs 3", "/v1/completions", completion(48)});
    std::vector<std::string> cut;  // the text each stop string should leave
    for (size_t sixth = 1; sixth <= 5; ++sixth) {
      // A 3-byte string first met at that place.
      for (size_t at = full.text.size() * sixth / 6; at + 3 <= full.text.size(); ++at) {
        const std::string stop = full.text.substr(at, 3);
        if (full.text.find(stop) != at) continue;
        json body = completion(48);
        body["stop"] = json::array({stop});
        cases.push_back({"completion, stop string " + json(stop).dump(), "/v1/completions", body});
        cut.push_back(full.text.substr(0, at));
        break;
      }
    }
    ASSERT_EQ(cut.size(), 5u) << "too few stop strings in: " << full.text;
    cases.push_back({"chat, top_logprobs 3", "/v1/chat/completions", chat(40)});
    for (const Case& c : cases) want.push_back(whole(plain.port, c.path, c.body));
    expect_same(want[0], full, "plain, again");
    for (size_t i = 0; i < cut.size(); ++i) {
      EXPECT_EQ(want[i + 1].finish, "stop") << cases[i + 1].name;
      EXPECT_EQ(want[i + 1].text, cut[i]) << cases[i + 1].name;
    }
    ASSERT_FALSE(want.back().text.empty());
  }
  for (const Drafter& d : drafters) {
    SCOPED_TRACE(d.name);
    SpecServer s(d.spec);
    int drafted = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Said got = whole(s.port, cases[i].path, cases[i].body);
      expect_same(got, want[i], "whole: " + cases[i].name);
      expect_same(streamed(s.port, cases[i].path, cases[i].body), want[i], "streamed: " + cases[i].name);
      drafted += got.drafted;
    }
    EXPECT_GT(drafted, 0) << "nothing was drafted";
  }
}

TEST(SpecServer, DraftModelKeepsLogprobsStopStringsAndStreams) {
  check_against_plain({{"draft model K 4", model_draft("deltacoder-draft", 4)},
                       {"draft model auto", with_auto(model_draft("deltacoder-draft", 0), 0)}});
}

TEST(SpecServer, SuffixDraftingKeepsLogprobsStopStringsAndStreams) {
  check_against_plain({{"suffix K 4", suffix_draft(4)}, {"suffix auto", with_auto(suffix_draft(0), 0)}});
}

TEST(SpecServer, ParallelDrafterKeepsLogprobsStopStringsAndStreams) {
  check_against_plain({{"parallel drafter K 4", model_draft("deltacoder-dspark", 4)},
                       {"parallel drafter auto", with_auto(model_draft("deltacoder-dspark", 7), 7)}});
}

}  // namespace
}  // namespace ds
