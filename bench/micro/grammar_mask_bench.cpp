// The token mask of a JSON-schema constraint over the bundled deltacoder's 4096-token
// vocabulary: computed from scratch (the trie walk) in three kinds of state, and looked up from
// the cache, which is what most steps of a constrained request pay.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

std::shared_ptr<ds::grammar::TokenVocabulary> vocab() {
  static auto v = [] {
    const ds::Tokenizer tok = ds::Tokenizer::load(DS_SOURCE_DIR "/models/deltacoder/tokenizer.json");
    std::vector<std::string> bytes(size_t(tok.vocab_size()));
    for (int32_t i = 0; i < tok.vocab_size(); ++i)
      if (tok.defines(i) && !tok.is_special(i)) bytes[size_t(i)] = std::string(tok.token_bytes(i));
    return std::make_shared<ds::grammar::TokenVocabulary>(std::move(bytes));
  }();
  return v;
}

// bounded: the name's string has a maxLength, which the grammar counts out position by position.
std::shared_ptr<ds::grammar::CompiledGrammar> compiled(size_t cache_bytes, bool bounded = false) {
  const auto schema = nlohmann::ordered_json::parse(
      bounded ? R"({"type":"object","properties":{"name":{"type":"string","maxLength":60},"age":{"type":"integer"},
          "tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]})"
              : R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
          "tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]})");
  return std::make_shared<ds::grammar::CompiledGrammar>(ds::grammar::json_schema_grammar(schema), vocab(), cache_bytes);
}

// Feeds `prefix` one byte-token at a time (the single-byte tokens spell anything).
void feed(ds::grammar::TokenConstraint& c, const std::string& prefix) {
  const auto& v = *vocab();
  for (char ch : prefix)
    for (int32_t id = 0; id < v.size(); ++id)
      if (v.bytes(id) == std::string(1, ch)) {
        c.accept(id);
        break;
      }
}

void BM_MaskFromScratch(benchmark::State& st, const std::string& prefix, bool bounded = false) {
  for (auto _ : st) {
    st.PauseTiming();
    auto fresh = compiled(0, bounded);
    ds::grammar::TokenConstraint c(fresh);
    feed(c, prefix);
    st.ResumeTiming();
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK_CAPTURE(BM_MaskFromScratch, object_start, std::string(""));
BENCHMARK_CAPTURE(BM_MaskFromScratch, in_string, std::string("{\"name\": \"Ada"));
BENCHMARK_CAPTURE(BM_MaskFromScratch, in_bounded_string, std::string("{\"name\": \"Ada"), true);
BENCHMARK_CAPTURE(BM_MaskFromScratch, in_integer, std::string("{\"name\": \"Ada\", \"age\": 3"));

void BM_MaskCached(benchmark::State& st) {
  auto g = compiled(64u << 20);
  ds::grammar::TokenConstraint warm(g);
  feed(warm, "{\"name\": \"Ada");
  (void)warm.allowed();
  for (auto _ : st) {
    st.PauseTiming();
    ds::grammar::TokenConstraint c(g);
    feed(c, "{\"name\": \"Ada");
    st.ResumeTiming();
    benchmark::DoNotOptimize(c.allowed().data());
  }
}
BENCHMARK(BM_MaskCached);

}  // namespace
