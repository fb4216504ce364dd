// The model's tokens as the byte strings a grammar sees, arranged in a trie so that tokens
// sharing a prefix share the matcher's work on it. Built once per server from the tokenizer.
// A token with no bytes (special tokens, undefined ids) is never allowed by a grammar; the
// engine adds the end-of-sequence tokens itself when the grammar is complete.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds::grammar {

class TokenVocabulary {
 public:
  // bytes[id]: what token id spells (empty: not a text token).
  explicit TokenVocabulary(std::vector<std::string> bytes);

  int32_t size() const { return int32_t(bytes_.size()); }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  struct Node {
    uint32_t first_edge = 0, num_edges = 0;  // into edges(), sorted by byte
    uint32_t first_token = 0, num_tokens = 0;  // into tokens(): ids spelled exactly by this path
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

}  // namespace ds::grammar
