// libFuzzer target: a JSON schema as response_format and tool parameters send it. Every input
// must compile to a grammar or be refused with a SchemaError / GrammarError (a 400 in the
// server), within the grammar's limits; a compiled grammar then decodes a few tokens over a
// small vocabulary, which must never fail except by ending. Any other exception, crash, hang or
// sanitizer report is a bug.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "grammar/token_vocabulary.h"

namespace {

std::shared_ptr<const ds::grammar::TokenVocabulary> vocabulary() {
  static const auto v = [] {
    std::vector<std::string> bytes;
    for (int c = 0x20; c < 0x7f; ++c) bytes.push_back(std::string(1, char(c)));
    for (const char* t : {"{\"", "\":", "\",\"", "\"}", "[]", "{}", "true", "false", "null", "12", "\xc3\xa9", "\xe2\x82\xac",
                          "0-", "T1", ":00", "ab"})
      bytes.push_back(t);
    return std::make_shared<const ds::grammar::TokenVocabulary>(std::move(bytes));
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ds::grammar::GrammarLimits;
  nlohmann::ordered_json schema;
  // The server parses bodies with a depth limit of its own; the compiler must hold without it.
  schema = nlohmann::ordered_json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size,
                                         nullptr, false);
  if (schema.is_discarded()) return 0;
  GrammarLimits limits;
  limits.max_compile_seconds = 5;
  limits.max_state_heads = 256;
  try {
    ds::grammar::Grammar g = ds::grammar::json_schema_grammar(schema, limits);
    auto cg = std::make_shared<ds::grammar::CompiledGrammar>(std::move(g), vocabulary(), 1u << 20);
    ds::grammar::TokenConstraint c(cg);
    // Decode: the allowed token picked by the input's bytes, until none or complete.
    for (size_t step = 0; step < 48; ++step) {
      const std::vector<uint64_t>& mask = c.allowed();
      std::vector<int32_t> ids;
      for (size_t w = 0; w < mask.size(); ++w)
        for (int b = 0; b < 64; ++b)
          if ((mask[w] >> b) & 1) ids.push_back(int32_t(w * 64 + size_t(b)));
      if (ids.empty()) break;
      const int32_t t = ids[size_t(data[step % size]) % ids.size()];
      if (!c.accept(t)) __builtin_trap();  // a token the mask allowed must be accepted
    }
  } catch (const ds::grammar::SchemaError&) {
  } catch (const ds::grammar::GrammarError&) {
  }
  return 0;
}
