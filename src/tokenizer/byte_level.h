// The GPT-2 byte-level alphabet: every byte maps to one printable code point, so a vocabulary of
// strings can hold any byte sequence and a token never contains a raw space or control byte.
// tokenizer.json stores tokens in this mapped form; the tokenizer works on raw bytes.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace ds::byte_level {

// Code point that stands for byte b.
char32_t codepoint_of(unsigned char b);

// The mapped form of each byte, UTF-8 encoded (1 or 2 bytes).
const std::array<std::string, 256>& byte_strings();

// Raw bytes -> mapped form (what vocab keys look like).
std::string encode(std::string_view bytes);

// Mapped form -> raw bytes; nullopt when s is not valid UTF-8 or holds a code point outside the
// alphabet (an added token such as "<| a |>" with a real space is not in mapped form).
std::optional<std::string> decode(std::string_view mapped);

}  // namespace ds::byte_level
