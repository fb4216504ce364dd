#include "server/openai_request.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace ds::server {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 32;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_float: return "number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    default: return "value";
  }
}

std::string num(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(int64_t(x));
  std::string s = std::to_string(x);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// A present, non-null field; null counts as absent, as the OpenAI API treats it.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw invalid_request(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
  return v->get<double>();
}

std::optional<int64_t> get_int(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::numeric_limits<int64_t>::max();
    return v->get<int64_t>();
  }
  throw invalid_request(std::string("'") + name + "' must be an integer, got " + type_name(*v), name);
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw invalid_request(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
  return v->get<bool>();
}

void parse_common(const json& body, GenerationRequest* g) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw invalid_request("'model' must be a string, got " + type_name(*m), "model");
    g->model = m->get<std::string>();
  }
  if (auto n = get_int(body, "n"); n && *n != 1)
    throw invalid_request("'n' must be 1 (one choice per request is supported), got " +
                              std::to_string(*n), "n");
  if (auto t = get_number(body, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0))
      throw invalid_request("'temperature' must be in [0, 2], got " + num(*t), "temperature");
    g->sampling.temperature = float(*t);
  }
  if (auto p = get_number(body, "top_p")) {
    if (!(*p > 0.0 && *p <= 1.0))
      throw invalid_request("'top_p' must be in (0, 1], got " + num(*p), "top_p");
    g->sampling.top_p = float(*p);
  }
  if (auto k = get_int(body, "top_k")) {
    if (*k < -1)
      throw invalid_request("'top_k' must be -1 or 0 (off) or a positive integer, got " +
                                std::to_string(*k), "top_k");
    g->sampling.top_k = *k <= 0 ? 0 : int(std::min<int64_t>(*k, std::numeric_limits<int>::max()));
  }
  if (auto mp = get_number(body, "min_p")) {
    if (!(*mp >= 0.0 && *mp <= 1.0))
      throw invalid_request("'min_p' must be in [0, 1], got " + num(*mp), "min_p");
    g->sampling.min_p = float(*mp);
  }
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer())
      throw invalid_request("'seed' must be an integer, got " + type_name(*s), "seed");
    g->sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
    g->seed_given = true;
  }
  // max_completion_tokens is the current name; max_tokens the older one. The newer wins.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (auto m = get_int(body, name)) {
      if (*m < 1)
        throw invalid_request(std::string("'") + name + "' must be at least 1, got " + std::to_string(*m), name);
      g->max_tokens = *m;
    }
  }
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      g->stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string())
          throw invalid_request("'stop[" + std::to_string(i) + "]' must be a string, got " +
                                    type_name((*s)[i]), "stop");
        g->stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      throw invalid_request("'stop' must be a string or an array of strings, got " + type_name(*s), "stop");
    }
    for (auto& st : g->stop)
      if (st.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
  }
  g->stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object())
      throw invalid_request("'stream_options' must be an object, got " + type_name(*so), "stream_options");
    if (auto iu = get_bool(*so, "include_usage")) g->include_usage = *iu;
  }
  g->ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  for (const char* pen : {"presence_penalty", "frequency_penalty", "repetition_penalty"})
    get_number(body, pen);  // type-checked, not applied
}

std::string content_text(const json& c, const std::string& where) {
  if (c.is_null()) return {};
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (size_t i = 0; i < c.size(); ++i) {
      const json& part = c[i];
      const std::string p = where + "[" + std::to_string(i) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw invalid_request("'" + p + "' must be an object with a 'type'", where);
      if (part["type"] != "text")
        throw invalid_request("'" + p + ".type' " + part["type"].dump() +
                                  " is not supported: only text content parts are", where);
      if (!part.contains("text") || !part["text"].is_string())
        throw invalid_request("'" + p + ".text' must be a string", where);
      out += part["text"].get<std::string>();
    }
    return out;
  }
  throw invalid_request("'" + where + "' must be a string or an array of content parts, got " +
                            type_name(c), where);
}

}  // namespace

json parse_json_body(const std::string& body) {
  json j;
  try {
    // No OpenAI request nests deeper than a few levels; refusing deep nesting early keeps a
    // hostile body from costing memory and time.
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw invalid_request("the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      return true;
    });
  } catch (const json::exception& e) {  // parse errors, and numbers too large for a double
    throw invalid_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object())
    throw invalid_request("the request body must be a JSON object, got " + type_name(j));
  return j;
}

std::vector<ChatTurn> parse_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) throw invalid_request("'messages' is required", "messages");
  if (!m->is_array()) throw invalid_request("'messages' must be an array, got " + type_name(*m), "messages");
  if (m->empty()) throw invalid_request("'messages' must not be empty", "messages");
  std::vector<ChatTurn> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object())
      throw invalid_request("'" + where + "' must be an object, got " + type_name(msg), "messages");
    auto r = msg.find("role");
    if (r == msg.end() || !r->is_string())
      throw invalid_request("'" + where + ".role' must be a string", "messages");
    ChatTurn t;
    t.role = r->get<std::string>();
    auto c = msg.find("content");
    t.content = c == msg.end() ? std::string() : content_text(*c, where + ".content");
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> parse_token_array(const json& v, const std::string& name) {
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer())
      throw invalid_request("'" + name + "[" + std::to_string(i) + "]' must be an integer token id, got " +
                                type_name(v[i]), name);
    ids.push_back(v[i].is_number_unsigned() && v[i].get<uint64_t>() > uint64_t(INT64_MAX)
                      ? INT64_MAX
                      : v[i].get<int64_t>());
  }
  return ids;
}

GenerationRequest parse_chat_request(const json& body) {
  GenerationRequest g;
  g.chat = true;
  parse_common(body, &g);
  g.messages = parse_messages(body);
  g.logprobs = get_bool(body, "logprobs").value_or(false);
  if (auto tl = get_int(body, "top_logprobs")) {
    if (*tl < 0 || *tl > 20)
      throw invalid_request("'top_logprobs' must be in [0, 20], got " + std::to_string(*tl), "top_logprobs");
    if (!g.logprobs && *tl > 0)
      throw invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    g.top_logprobs = int(*tl);
  }
  return g;
}

GenerationRequest parse_completion_request(const json& body) {
  GenerationRequest g;
  parse_common(body, &g);
  const json* p = field(body, "prompt");
  if (!p) throw invalid_request("'prompt' is required", "prompt");
  if (p->is_string()) {
    g.prompt_text = p->get<std::string>();
    if (g.prompt_text.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
  } else if (p->is_array()) {
    if (p->empty()) throw invalid_request("'prompt' must not be empty", "prompt");
    const json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {
      // A batch of prompts: the API allows it, this server takes one per request.
      if (p->size() != 1)
        throw invalid_request("'prompt' holds " + std::to_string(p->size()) +
                                  " prompts; send one prompt per request", "prompt");
      if (first.is_string()) {
        g.prompt_text = first.get<std::string>();
        if (g.prompt_text.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
      } else {
        if (first.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
        g.prompt_is_ids = true;
        g.prompt_ids = parse_token_array(first, "prompt[0]");
      }
    } else {
      g.prompt_is_ids = true;
      g.prompt_ids = parse_token_array(*p, "prompt");
    }
  } else {
    throw invalid_request("'prompt' must be a string, an array of token ids, or an array of one of those, got " +
                              type_name(*p), "prompt");
  }
  if (auto lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > 20)
      throw invalid_request("'logprobs' must be in [0, 20], got " + std::to_string(*lp), "logprobs");
    g.logprobs = true;
    g.top_logprobs = int(*lp);
  }
  if (get_bool(body, "echo").value_or(false))
    throw invalid_request("'echo' is not supported", "echo");
  if (const json* s = field(body, "suffix"))
    if (!(s->is_string() && s->get<std::string>().empty()))
      throw invalid_request("'suffix' is not supported", "suffix");
  return g;
}

}  // namespace ds::server
