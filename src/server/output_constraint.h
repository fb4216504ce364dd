// Output constraints of chat requests: response_format json_object / json_schema, and the forced
// call of tool_choice "required" or a named function (server/tools/tool_call_grammar.h), compiled to
// token-level grammars over the model's vocabulary.
//
// A compiled grammar carries the cache of token masks its requests computed, so grammars are
// kept by their source (the schema or the tools as sent, the choice, the format): an agent that
// sends the same tools every turn compiles them once and, after its first call, decodes mostly
// from cached masks. The cache is bounded by bytes (each grammar's flat form and what it has
// learnt) and by count; the least recently used grammar goes first.
//
// Compiling is the request's own cost, paid on its handler thread and never on the engine's:
// the grammar, and the token mask of its first state (the mask the engine would otherwise
// compute at the request's first step). Compiles run at most `concurrent_compiles` at once, so
// many clients sending new schemas together queue instead of taking every core and a grammar's
// worth of memory each; each is bounded by the grammar's limits (grammar/grammar.h).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "server/openai_request.h"
#include "server/tools/tool_call_grammar.h"
#include "server/tools/tool_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::grammar {
class CompiledGrammar;
class TokenConstraint;
class TokenVocabulary;
}  // namespace ds::grammar

namespace ds::server {

// The special tokens that are part of the format's tool-call syntax (Kimi's section and call
// markers; ChatML's <tool_call> tags where a tokenizer makes them special). Their text is what
// the tool parser reads, so the output's text includes them, and grammars may produce them.
std::vector<int32_t> tool_syntax_tokens(const Tokenizer& tok, ChatFormat format);

// tool_choice "required" with parallel calls: at most this many calls in one turn, so a model that
// never chooses to stop still ends.
inline constexpr int kMaxForcedToolCalls = 8;

class OutputConstraints {
 public:
  // model_vocab: the model's logits rows (may exceed the tokenizer's ids; those are never
  // produced under a constraint).
  OutputConstraints(const Tokenizer& tok, int model_vocab, ChatFormat format, size_t max_grammars = 32,
                    size_t mask_cache_bytes_per_grammar = 8u << 20, const grammar::GrammarLimits& limits = {},
                    size_t cache_bytes = 128u << 20, int concurrent_compiles = 1);
  ~OutputConstraints();

  // A fresh constraint for this request, or null when its output is free. Throws ApiError 400
  // (param "response_format" or "tools") for a schema outside the supported subset, naming the
  // keyword and where it is.
  std::shared_ptr<grammar::TokenConstraint> for_request(const GenerationRequest& g);

  size_t cached_grammars();
  size_t cached_bytes();  // what the cached grammars hold now
  int64_t grammars_compiled() const { return compiled_.load(); }
  int64_t grammars_evicted() const { return evicted_.load(); }

 private:
  std::shared_ptr<grammar::CompiledGrammar> compile(const GenerationRequest& g);
  void evict_locked();

  ChatFormat format_;
  ToolSyntaxSpelling spelling_;
  std::shared_ptr<const grammar::TokenVocabulary> vocab_;
  size_t max_grammars_, mask_cache_bytes_;
  grammar::GrammarLimits limits_;
  size_t cache_bytes_;
  int concurrent_compiles_;
  std::mutex compile_mu_;
  std::condition_variable compile_cv_;
  int compiling_ = 0;
  std::mutex mu_;
  using Entry = std::pair<std::string, std::shared_ptr<grammar::CompiledGrammar>>;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::atomic<int64_t> compiled_{0}, evicted_{0};
};

}  // namespace ds::server
