// UTF-8 helpers shared by the byte-level map, the stream decoder and the trainer. Text reaching
// the tokenizer may be arbitrary bytes, so every helper here accepts invalid input.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace ds::utf8 {

void append(std::string& out, char32_t cp);

// Decodes the well-formed sequence at s[pos] (no overlongs, surrogates or values past
// U+10FFFF) and advances pos past it. Returns false and leaves pos alone when there is none.
bool next(std::string_view s, std::size_t& pos, char32_t& cp);

bool is_valid(std::string_view s);

// Length of the final bytes of s that are a proper prefix of a well-formed sequence: bytes that
// the next token may complete. 0 when s ends on a boundary or on bytes no continuation can fix.
std::size_t incomplete_tail(std::string_view s);

// Replaces every ill-formed sequence by U+FFFD (one per maximal invalid subpart, as the Unicode
// standard recommends), for callers that must hand on valid text (JSON, SSE).
std::string sanitize(std::string_view s);

}  // namespace ds::utf8
