// ds::Tokenizer: a Hugging Face tokenizer.json byte-level BPE tokenizer (GPT-2, Llama-3, Qwen2
// style, and what `deltaserve tokenizer train` writes).
//
// Supported tokenizer.json: model.type "BPE" (vocab, merges as "a b" strings or [a, b] pairs,
// ignore_merges), normalizer null, pre_tokenizer ByteLevel or a Sequence of Split (Regex or
// String pattern) and ByteLevel stages, decoder ByteLevel (or null), post_processor null,
// ByteLevel or TemplateProcessing (encode never adds BOS/EOS, so a template is not applied).
// Anything else is refused with a ds::Error naming the field and the file.
//
// A Tokenizer is cheap to copy (copies share the immutable tables) and safe to use from many
// threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

class Tokenizer {
 public:
  // Throws ds::Error naming the path and what is wrong.
  static Tokenizer load(const std::string& path_to_tokenizer_json);
  // `where` names the source in error messages (a path, "inline", ...).
  static Tokenizer from_json_text(const std::string& json_text, const std::string& where);

  // Any bytes are accepted: text that is not UTF-8 encodes byte by byte and decodes back to the
  // same bytes. With allow_special, special tokens written in the text (e.g. "<|im_end|>")
  // become their ids; without it they are encoded as ordinary text, which is what user content
  // must get. Added tokens that are not special are always matched.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;

  // The bytes the ids stand for, concatenated; not necessarily valid UTF-8 (a token may hold
  // part of a character). Throws ds::Error for an id outside [0, vocab_size()) or one the file
  // does not define.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Decoded bytes of one token (possibly an incomplete UTF-8 sequence; see StreamDecoder).
  std::string token_text(int32_t id) const;
  // Same, without a copy; the view lives as long as any copy of this Tokenizer.
  std::string_view token_bytes(int32_t id) const;

  // One past the largest id (model vocabulary and added tokens together).
  int32_t vocab_size() const;
  // Whether id stands for any bytes: false outside [0, vocab_size()) and for ids the file leaves
  // undefined. A model's embedding may be padded past its tokenizer; such ids have no text.
  bool defines(int32_t id) const;
  // Looks a token up as the file spells it: the byte-level form for vocabulary entries
  // ("Ġhello"), the content for added tokens ("<|im_end|>").
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;

 private:
  struct Data;  // the loaded tables, in tokenizer_data.h

  explicit Tokenizer(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  void check_id(int32_t id) const;

  std::shared_ptr<const Data> data_;
};

}  // namespace ds
