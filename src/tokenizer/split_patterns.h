// The split regexes byte-level BPE tokenizers publish, by name. Kept apart from the
// pre-tokenizer so the GGUF reader (model/), which names them in its metadata, can use them.
#pragma once
#include <string_view>

namespace ds {

// ByteLevel's built-in pattern (use_regex: true), the one GPT-2 published.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The GPT-4 style pattern (Llama-3, Qwen2 use it too): case-insensitive contractions, digits
// in groups of at most three, newlines kept apart from indentation. The trainer uses this one.
inline constexpr std::string_view kGpt4SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace ds
