#include "server/server_context.h"

#include <algorithm>

#include "server/chat_prompt.h"

namespace ds::server {

ServerContext::ServerContext(Engine& e, Tokenizer t, ServerOptions o)
    : engine(e), tokenizer(std::move(t)), opts(std::move(o)),
      chat_format(detect_chat_format(tokenizer, !opts.chat_template.empty() ? opts.chat_template : model_chat_template(opts.model_dir))),
      tool_syntax_ids(tool_syntax_tokens(tokenizer, chat_format)),
      constraints(tokenizer, e.vocab_size(), chat_format, 32, 8u << 20, opts.grammar_limits, opts.grammar_cache_bytes) {
  for (size_t i = 0; i < opts.served_model_names.size(); ++i)
    served_names += (i ? ", " : "") + opts.served_model_names[i];
  if (auto id = tokenizer.token_id(kChatEndOfTurn)) end_of_turn = *id;
  guard.listen_host = opts.host;
  guard.allowed_hosts = opts.allowed_hosts;
  guard.allowed_origins = opts.allowed_origins;
  guard.api_key = opts.api_key;
  if (!opts.request_log_path.empty()) request_log.open(opts.request_log_path);
}

bool ServerContext::serves(const std::string& name) const {
  const auto& n = opts.served_model_names;
  return std::find(n.begin(), n.end(), name) != n.end();
}

}  // namespace ds::server
