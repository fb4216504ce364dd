#include "model/model_files.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_tokenizer.h"
#include "core/json_parse.h"
#include "model/gguf_model.h"

namespace ds {

namespace fs = std::filesystem;

bool is_gguf_model(const std::string& path) { return !fs::is_directory(path) && is_gguf_file(path); }

WeightStore open_model_weights(const std::string& path) {
  // The test WeightStore::open made when it read GGUF itself (a directory never passes it).
  if (is_gguf_file(path)) return gguf_weight_store(path);
  return WeightStore::open(path);
}

std::optional<TokenizerText> model_tokenizer_json(const std::string& path) {
  if (is_gguf_model(path)) {
    const GgufFile g = GgufFile::open(path);
    std::optional<std::string> j = gguf_tokenizer_json(g);
    if (!j) return std::nullopt;
    return TokenizerText{std::move(*j), "GGUF " + path + " (tokenizer.ggml.*)"};
  }
  const fs::path p = fs::path(path) / "tokenizer.json";
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return TokenizerText{ss.str(), p.string()};
}

std::string model_chat_template_text(const std::string& path) {
  if (is_gguf_model(path)) return gguf_chat_template(GgufFile::open(path));
  std::ifstream in(fs::path(path) / "tokenizer_config.json", std::ios::binary);
  if (!in) return {};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A broken config is the loader's business; here it just means "no template".
  const nlohmann::json j = parse_json_or_discarded(text);
  if (!j.is_object() || !j.contains("chat_template")) return {};
  const nlohmann::json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return {};
}

}  // namespace ds
