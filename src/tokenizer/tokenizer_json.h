// Reading the parts of a Hugging Face tokenizer.json. Tokenizer::from_json_text is defined in
// tokenizer_json.cpp; the pre-tokenizer parser is also used by the trainer, so that training
// and encoding cut text with one and the same code.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/pretokenizer.h"

namespace ds::tokenizer_json {

// j is the "pre_tokenizer" value. Throws ds::Error naming `where` and the field.
PreTokenizer parse_pre_tokenizer(const nlohmann::json& j, const std::string& where);

}  // namespace ds::tokenizer_json
