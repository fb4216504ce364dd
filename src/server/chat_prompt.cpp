#include "server/chat_prompt.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/json_parse.h"
#include "server/api_error.h"

namespace ds::server {

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, ChatFormat format, const std::vector<ChatTurn>& messages,
                                     std::string_view tools_json, bool add_generation_prompt) {
  try {
    return encode_chat(tok, format, messages, tools_json, add_generation_prompt);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "messages");
  }
}

std::string model_chat_template(const std::string& model_dir) {
  if (model_dir.empty()) return {};
  const std::filesystem::path p = std::filesystem::path(model_dir) / "tokenizer_config.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A broken config is the loader's business; here it just means "no template".
  const nlohmann::json j = parse_json_or_discarded(text);
  if (!j.is_object()) return {};
  auto it = j.find("chat_template");
  if (it == j.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array())  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
  return {};
}

}  // namespace ds::server
