// What a --model path names: a checkpoint folder (config.json, *.safetensors, tokenizer.json,
// tokenizer_config.json) or one GGUF file that carries all of it (model/gguf_model.h). Callers
// ask here for the weights, the tokenizer and the chat template instead of opening files in the
// folder, so both kinds of path work everywhere.
#pragma once
#include <optional>
#include <string>

#include "checkpoint/safetensors.h"

namespace ds {

bool is_gguf_model(const std::string& path);

// The model's weights by their Hugging Face names: the folder's safetensors
// (WeightStore::open), or the GGUF file's tensors renamed and repacked (gguf_weight_store). Here
// and not in checkpoint/, since reading GGUF tensors under those names takes the architecture's
// name table (model/gguf_names.h), which checkpoint/ does not know.
WeightStore open_model_weights(const std::string& path);

struct TokenizerText {
  std::string json;   // tokenizer.json's text
  std::string where;  // names the source in errors
};
// The model's tokenizer, or nothing when the folder has no tokenizer.json (or the GGUF no
// tokenizer.ggml.model). Throws ds::Error for a GGUF tokenizer this server cannot read.
std::optional<TokenizerText> model_tokenizer_json(const std::string& path);
// tokenizer_config.json's chat_template (a string, or the "default" of a list), or the GGUF's
// tokenizer.chat_template; "" when there is none.
std::string model_chat_template_text(const std::string& path);

}  // namespace ds
