// The BPE model: merge rules applied by rank to one pre-tokenized piece of raw bytes.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ds {

struct BpeMerge {
  int32_t left, right, result;
};

class BpeModel {
 public:
  BpeModel() = default;
  // byte_ids[b]: the token for the single byte b. merges: in rank order (first = applied first);
  // a repeated pair keeps its first rank. whole_words: raw bytes -> id, consulted before merging
  // when tokenizer.json sets ignore_merges (Llama-3 does); empty otherwise.
  BpeModel(std::array<int32_t, 256> byte_ids, const std::vector<BpeMerge>& merges,
           std::unordered_map<std::string, int32_t> whole_words);

  // Appends the ids of one piece. Lowest rank first, leftmost first among equal ranks (the
  // order the Hugging Face implementation uses), with a heap so long pieces stay O(n log n).
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  std::size_t merge_count() const { return ranks_.size(); }

 private:
  struct Rule {
    int32_t rank, result;
  };
  static uint64_t key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }

  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Rule> ranks_;
  std::unordered_map<std::string, int32_t> whole_words_;
};

}  // namespace ds
