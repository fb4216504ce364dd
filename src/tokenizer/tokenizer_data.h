// The loaded tables behind ds::Tokenizer, shared by the loader (tokenizer_json.cpp) and the
// encode/decode code (tokenizer.cpp). Not part of the public interface.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/piece_cache.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ds {

enum class TokenKind : uint8_t { kUndefined, kVocab, kAdded, kSpecial };

struct Tokenizer::Data {
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string source;                    // for error messages
  std::vector<std::string> id_bytes;     // decoded bytes per id
  std::vector<TokenKind> kind;           // per id
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> by_spelling;  // as in the file
  BpeModel bpe;
  PreTokenizer pre;
  AddedTokenMatcher added;
  PieceCache cache;
};

}  // namespace ds
