// Byte-level BPE training that writes a Hugging Face tokenizer.json.
//
// Id layout of the output: 0..255 are the single bytes in byte order, then one id per merge in
// the order learned, then the special tokens in the order given. The specials are added tokens
// (special: true) and not part of model.vocab, as in Llama-3 and Qwen2 files; Hugging Face
// assigns added tokens the ids after the model vocabulary in file order, which is exactly this
// layout, so both readers agree. vocab_size is the requested size unless the corpus runs out of
// pairs to merge first (then it is 256 + merges + specials; stats() says so).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

struct BpeTrainerOptions {
  int vocab_size = 8192;
  std::vector<std::string> special_tokens;
  // The pre-tokenizer regex; written into the output so encoding splits as training did.
  std::string split_pattern;  // empty: kGpt4SplitPattern
  // Pairs seen fewer times than this are never merged (training stops at the first one).
  int64_t min_pair_count = 1;
};

struct BpeTrainerStats {
  int64_t bytes = 0;         // text fed in
  int64_t pieces = 0;        // pre-tokenized pieces counted
  int64_t unique_pieces = 0;
  int merges = 0;
  int vocab_size = 0;        // of the written tokenizer, specials included
  double count_seconds = 0;  // pre-tokenizing and counting
  double merge_seconds = 0;
};

class BpeTrainer {
 public:
  // Throws ds::Error when the options cannot give a tokenizer (vocab_size below 256 + specials,
  // empty, duplicate or non-UTF-8 special tokens, a pattern that does not compile).
  explicit BpeTrainer(BpeTrainerOptions options);
  ~BpeTrainer();
  BpeTrainer(const BpeTrainer&) = delete;
  BpeTrainer& operator=(const BpeTrainer&) = delete;

  // Pre-tokenizes text and counts its pieces. Occurrences of special tokens are cut out first,
  // so no merge spans one. Any bytes are accepted.
  void add_text(std::string_view text);

  // Learns the merges and returns the tokenizer.json text. Deterministic: the same texts (in
  // any order) give the same file; among pairs of equal count the smaller (left id, right id)
  // wins.
  std::string train();

  const BpeTrainerStats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One-shot form: texts are the training documents themselves.
std::string train_bpe_tokenizer_json(const std::vector<std::string>& texts, int vocab_size,
                                     const std::vector<std::string>& special_tokens);

}  // namespace ds
