#include "server/output_constraint.h"

#include <malloc.h>

#include <algorithm>

#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "grammar/token_vocabulary.h"
#include "server/api_error.h"
#include "server/tools/tool_call_grammar.h"

namespace ds::server {

namespace {

// The special token of each marker of the format's syntax, -1 where the tokenizer has none.
std::vector<int32_t> marker_tokens(const Tokenizer& tok, ChatFormat format) {
  std::vector<int32_t> ids;
  for (std::string_view n : tool_syntax_markers(tool_format_for(format))) {
    const auto id = tok.token_id(n);
    ids.push_back(id && tok.is_special(*id) ? *id : -1);
  }
  return ids;
}

ToolSyntaxSpelling syntax_spelling(const Tokenizer& tok, ChatFormat format) {
  ToolSyntaxSpelling s;
  const std::vector<int32_t> ids = marker_tokens(tok, format);
  for (size_t k = 0; k < ids.size(); ++k)
    s.markers.push_back(ids[k] < 0 ? std::string() : std::string(1, char(kPrivateMarkerByte + k)));
  return s;
}

std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const Tokenizer& tok, int model_vocab,
                                                                   ChatFormat format) {
  const std::vector<int32_t> markers = marker_tokens(tok, format);
  std::vector<std::string> bytes(size_t(std::max(model_vocab, 0)));
  for (int32_t id = 0; id < model_vocab && id < tok.vocab_size(); ++id) {
    if (!tok.defines(id)) continue;
    // A marker's special token gets its private byte (server/tools/tool_call_grammar.h). Other
    // special tokens (turn markers, end of text) spell nothing a grammar may produce; the
    // engine admits the end tokens itself once the output is complete.
    if (tok.is_special(id)) {
      const auto k = std::find(markers.begin(), markers.end(), id);
      if (k != markers.end()) bytes[size_t(id)] = std::string(1, char(kPrivateMarkerByte + (k - markers.begin())));
      continue;
    }
    // Text tokens holding a byte of the private range (byte-level BPE has one per byte) are
    // left out: those bytes spell markers here, and no UTF-8 text contains them.
    const std::string_view b = tok.token_bytes(id);
    if (std::any_of(b.begin(), b.end(), [](char c) { return static_cast<unsigned char>(c) >= kPrivateMarkerByte; }))
      continue;
    bytes[size_t(id)] = std::string(b);
  }
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes));
}

std::string grammar_key(const GenerationRequest& g) {
  const bool forced = g.tool_choice == ToolChoice::Required || g.tool_choice == ToolChoice::Named;
  if (g.tool_choice == ToolChoice::Named) return "tool\n" + g.tool_choice_name + "\n" + g.tools_json;
  if (forced) return std::string("tools\n") + (g.parallel_tool_calls ? "parallel\n" : "single\n") + g.tools_json;
  if (g.response_format == ResponseFormat::JsonSchema) return "schema\n" + g.response_schema.dump();
  if (g.response_format == ResponseFormat::JsonObject) return "object";
  return {};
}

}  // namespace

std::vector<int32_t> tool_syntax_tokens(const Tokenizer& tok, ChatFormat format) {
  std::vector<int32_t> ids;
  for (int32_t id : marker_tokens(tok, format))
    if (id >= 0) ids.push_back(id);
  return ids;
}

OutputConstraints::OutputConstraints(const Tokenizer& tok, int model_vocab, ChatFormat format, size_t max_grammars,
                                     size_t mask_cache_bytes_per_grammar, const grammar::GrammarLimits& limits,
                                     size_t cache_bytes, int concurrent_compiles)
    : format_(format), spelling_(syntax_spelling(tok, format)), vocab_(grammar_vocabulary(tok, model_vocab, format)),
      max_grammars_(std::max<size_t>(max_grammars, 1)), mask_cache_bytes_(mask_cache_bytes_per_grammar),
      limits_(limits), cache_bytes_(cache_bytes), concurrent_compiles_(std::max(concurrent_compiles, 1)) {}

OutputConstraints::~OutputConstraints() = default;

std::shared_ptr<grammar::CompiledGrammar> OutputConstraints::compile(const GenerationRequest& g) {
  grammar::Grammar gr(limits_);
  if (g.tool_choice == ToolChoice::Required || g.tool_choice == ToolChoice::Named) {
    std::vector<ToolGrammarSpec> specs;
    for (const ToolSpec& t : g.tools) specs.push_back({t.name, t.parameters});
    try {
      // A named function is one call to it, as the OpenAI API gives it; "required" may make
      // several when parallel calls are allowed.
      const bool named = g.tool_choice == ToolChoice::Named;
      gr = tool_call_grammar(tool_format_for(format_), specs, named ? g.tool_choice_name : std::string(),
                             named ? 1 : (g.parallel_tool_calls ? kMaxForcedToolCalls : 1), spelling_, limits_);
    } catch (const grammar::SchemaError& e) {
      throw invalid_request(std::string("a tool's parameters cannot be enforced for 'tool_choice': ") + e.what() +
                                " (at " + e.where() + ")",
                            "tools");
    } catch (const grammar::GrammarTooLarge& e) {
      throw invalid_request(std::string("the tools' parameter schemas are too large to enforce for 'tool_choice': ") +
                                e.what(),
                            "tools");
    } catch (const grammar::GrammarError& e) {
      throw invalid_request(std::string("a tool's parameters cannot be enforced for 'tool_choice': ") + e.what(),
                            "tools");
    }
  } else if (g.response_format == ResponseFormat::JsonSchema) {
    try {
      gr = grammar::json_schema_grammar(g.response_schema, limits_);
    } catch (const grammar::SchemaError& e) {
      throw invalid_request(std::string("'response_format.json_schema.schema': ") + e.what() + " (at '" + e.where() +
                                "' in the schema)",
                            "response_format");
    } catch (const grammar::GrammarTooLarge& e) {
      throw invalid_request(std::string("'response_format.json_schema.schema' is too large to enforce: ") + e.what(),
                            "response_format");
    } catch (const grammar::GrammarError& e) {
      throw invalid_request(std::string("'response_format.json_schema.schema': ") + e.what(), "response_format");
    }
  } else {
    gr = grammar::json_object_grammar(limits_);
  }
  try {
    // A grammar's memory is many small blocks (states, masks) spread through the allocator's
    // arenas; glibc keeps freed pages in them unless asked. When the last holder of a grammar
    // (the cache, or the last request using it) lets go, the freed pages go back to the system.
    return std::shared_ptr<grammar::CompiledGrammar>(
        new grammar::CompiledGrammar(std::move(gr), vocab_, mask_cache_bytes_), [](grammar::CompiledGrammar* cg) {
          delete cg;
          malloc_trim(0);
        });
  } catch (const grammar::GrammarTooLarge& e) {
    throw invalid_request(std::string("the output constraint is too ambiguous to enforce: ") + e.what(),
                          g.response_format == ResponseFormat::JsonSchema ? "response_format" : "tools");
  }
}

void OutputConstraints::evict_locked() {
  // Bytes first: a handful of huge grammars must not hold the memory of 32 small ones.
  size_t total = 0;
  for (const Entry& e : lru_) total += e.second->memory_bytes();
  while (lru_.size() > 1 && (lru_.size() > max_grammars_ || total > cache_bytes_)) {
    total -= std::min(total, lru_.back().second->memory_bytes());
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++evicted_;
  }
}

std::shared_ptr<grammar::TokenConstraint> OutputConstraints::for_request(const GenerationRequest& g) {
  if (!g.chat) return nullptr;
  const std::string key = grammar_key(g);
  if (key.empty()) return nullptr;
  std::shared_ptr<grammar::CompiledGrammar> cg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      cg = it->second->second;
    }
  }
  if (!cg) {
    // Compiled outside the cache's lock, at most concurrent_compiles_ at once. Two requests
    // racing on one new schema may both compile it; the second one's copy is dropped.
    {
      std::unique_lock<std::mutex> lk(compile_mu_);
      compile_cv_.wait(lk, [&] { return compiling_ < concurrent_compiles_; });
      ++compiling_;
    }
    struct Release {
      OutputConstraints* self;
      ~Release() {
        {
          std::lock_guard<std::mutex> lk(self->compile_mu_);
          --self->compiling_;
        }
        self->compile_cv_.notify_one();
      }
    } release{this};
    cg = compile(g);
    // The first state's mask, here rather than in the engine's first step for this request.
    grammar::TokenConstraint(cg).allowed();
    std::lock_guard<std::mutex> lock(mu_);
    ++compiled_;
    if (auto it = index_.find(key); it != index_.end()) {
      cg = it->second->second;
    } else {
      lru_.emplace_front(key, cg);
      index_[key] = lru_.begin();
      evict_locked();
    }
  }
  return std::make_shared<grammar::TokenConstraint>(std::move(cg));
}

size_t OutputConstraints::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const Entry& e : lru_) total += e.second->memory_bytes();
  return total;
}

size_t OutputConstraints::cached_grammars() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace ds::server
