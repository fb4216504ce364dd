// The tokenizer inside a GGUF file (tokenizer.ggml.*), to and from the tokenizer.json text a
// checkpoint folder holds, so one tokenizer implementation (tokenizer/) reads both.
//
// Only byte-level BPE ("gpt2" in GGUF) is taken. GGUF names the pre-tokenizer's split regex
// (tokenizer.ggml.pre) instead of spelling it; the names this project knows map to the regexes of
// tokenizer/split_patterns.h ("gpt-2": GPT-2's, "llama-bpe" / "llama3": the GPT-4 / Llama-3 one).
// Token types: normal (1) tokens are the vocabulary; control (3) are special added tokens and
// user-defined (4) non-special ones; unknown (2) and unused (5) ids are left undefined.
#pragma once
#include <optional>
#include <string>

namespace ds {

class GgufFile;
class GgufWriter;

// The tokenizer.json text, or nothing when the file has no tokenizer.ggml.model. Throws
// ds::Error naming the file and key for another model type, an unknown pre-tokenizer, or lists
// of mismatched lengths.
std::optional<std::string> gguf_tokenizer_json(const GgufFile& g);

// Writes tokenizer.ggml.* for a tokenizer.json text (vocab_size: the model's; ids past the
// tokenizer's own are written as unused tokens so token_embd and the list agree). Throws naming
// `where` for a tokenizer GGUF cannot express (not BPE, or a split regex with no GGUF name).
void write_gguf_tokenizer(const std::string& tokenizer_json, const std::string& where, int vocab_size, GgufWriter& w);

}  // namespace ds
