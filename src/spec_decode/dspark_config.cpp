#include "spec_decode/dspark_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "model/config.h"

namespace ds {

namespace {
using json = nlohmann::json;

bool read_json(const std::string& path, json* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = parse_json_or_discarded(ss.str());
  return !out->is_discarded();
}

int positive_int(const json& j, const char* key, const std::string& where, int lo, int hi) {
  DS_CHECK(j.contains(key) && j[key].is_number_integer(), where + ": '" + key + "' must be an integer");
  const int64_t v = j[key].get<int64_t>();
  DS_CHECK(v >= lo && v <= hi, where + ": '" + key + "' is " + std::to_string(v) + ", outside [" + std::to_string(lo) +
                                   ", " + std::to_string(hi) + "]");
  return int(v);
}
}  // namespace

bool is_dspark_dir(const std::string& dir) {
  json j;
  if (!std::filesystem::is_directory(dir) || !read_json(dir + "/config.json", &j) || !j.is_object()) return false;
  return j.contains("model_type") && j["model_type"].is_string() && j["model_type"].get<std::string>() == kDSparkModelType;
}

DSparkConfig load_dspark_config(const std::string& dir) {
  const std::string where = dir + "/config.json";
  json j;
  DS_CHECK(read_json(where, &j) && j.is_object(), where + ": not a readable JSON object");
  DSparkConfig c;
  c.hidden_size = positive_int(j, "hidden_size", where, 1, 65536);
  c.vocab_size = positive_int(j, "vocab_size", where, 1, 1 << 24);
  c.num_layers = positive_int(j, "num_hidden_layers", where, 1, 64);
  c.num_heads = positive_int(j, "num_attention_heads", where, 1, 1024);
  c.head_dim = positive_int(j, "head_dim", where, 2, 512);
  DS_CHECK(c.head_dim % 2 == 0, where + ": 'head_dim' must be even (rotate-half RoPE)");
  c.intermediate_size = positive_int(j, "intermediate_size", where, 1, 1 << 20);
  c.block_size = positive_int(j, "block_size", where, 1, 64);
  c.markov_rank = positive_int(j, "markov_rank", where, 1, 4096);
  c.context_window = positive_int(j, "context_window", where, 1, 1 << 16);
  DS_CHECK(j.contains("target_layer_ids") && j["target_layer_ids"].is_array() && !j["target_layer_ids"].empty(),
           where + ": 'target_layer_ids' must be a non-empty list of layer indices");
  for (const json& v : j["target_layer_ids"]) {
    DS_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < 4096,
             where + ": 'target_layer_ids' holds " + v.dump() + ", not a layer index");
    c.target_layer_ids.push_back(int(v.get<int64_t>()));
  }
  if (j.contains("rope_theta")) {
    DS_CHECK(j["rope_theta"].is_number() && j["rope_theta"].get<double>() > 0, where + ": 'rope_theta' must be positive");
    c.rope_theta = j["rope_theta"].get<double>();
  }
  if (j.contains("rms_norm_eps")) {
    DS_CHECK(j["rms_norm_eps"].is_number() && j["rms_norm_eps"].get<double>() > 0, where + ": 'rms_norm_eps' must be positive");
    c.rms_norm_eps = float(j["rms_norm_eps"].get<double>());
  }
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int32_t>());
    else if (e.is_array())
      for (const json& v : e) {
        DS_CHECK(v.is_number_integer(), where + ": 'eos_token_id' must hold token ids");
        c.eos_token_ids.push_back(v.get<int32_t>());
      }
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int32_t>();
  if (j.contains("context_copy")) {
    DS_CHECK(j["context_copy"].is_boolean(), where + ": 'context_copy' must be true or false");
    c.context_copy = j["context_copy"].get<bool>();
  }
  return c;
}

void check_dspark_fits(const DSparkConfig& d, const ModelConfig& t, int k) {
  for (int l : d.target_layer_ids)
    DS_CHECK(l < t.num_layers, "--draft-model reads target layer " + std::to_string(l) + " (target_layer_ids) but the target has " +
                                   std::to_string(t.num_layers) + " layers [0, " + std::to_string(t.num_layers) + ")");
  DS_CHECK(d.hidden_size == t.hidden_size, "--draft-model has hidden size " + std::to_string(d.hidden_size) + ", the target " +
                                               std::to_string(t.hidden_size) +
                                               ": a parallel drafter shares the target's embedding and LM head");
  DS_CHECK(d.vocab_size == t.vocab_size, "--draft-model has a vocabulary of " + std::to_string(d.vocab_size) + " tokens, the target " +
                                             std::to_string(t.vocab_size) + ": a draft must share the target's tokenizer");
  DS_CHECK(d.eos_token_ids == t.eos_token_ids && d.bos_token_id == t.bos_token_id,
           "--draft-model's special tokens (bos, eos) differ from the target's: a draft must share the target's tokenizer");
  DS_CHECK(k <= d.block_size, "--num-speculative-tokens " + std::to_string(k) + " exceeds the drafter's block of " +
                                  std::to_string(d.block_size) + " (block_size in its config.json)");
}

}  // namespace ds
