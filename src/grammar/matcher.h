// Runs a finished Grammar over bytes. The state is a set of stacks (the grammar may be
// ambiguous, and a rule's alternatives are tried side by side); each stack lists the symbol to
// match next on top and, below it, where each enclosing rule resumes. Stacks are persistent
// linked lists in an arena, so advancing by a byte makes one node per surviving stack and
// sibling stacks share their tails.
//
// The token mask walks the vocabulary's trie with this: every trie edge is one advance(), and
// the nodes a subtree made are dropped (truncate) when the walk leaves it.
//
// A state may hold at most the grammar's limits().max_state_heads stacks, and one advance may
// make at most a fixed multiple of that many nodes: an ambiguous grammar whose stacks double
// with every byte then refuses the byte (advance returns false and overflowed() says why)
// instead of growing until memory runs out.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace ds::grammar {

class Matcher {
 public:
  static constexpr int32_t kAccepted = -1;  // the empty stack: the whole input is a sentence

  explicit Matcher(const Grammar& g);

  // The state before any input: the root rule, expanded.
  void initial(std::vector<int32_t>* heads);
  // Heads of the state after `byte`, appended to *out (deduplicated). Returns false when none
  // survive, or when the state would pass the limits (then nothing is appended).
  bool advance(const int32_t* heads, size_t n, uint8_t byte, std::vector<int32_t>* out);
  // The union of bytes any head can take next (kAccepted takes none).
  ByteSet next_bytes(const int32_t* heads, size_t n) const;

  // The last initial() or advance() hit the limits on stacks or work.
  bool overflowed() const { return overflowed_; }

  size_t arena_size() const { return nodes_.size(); }
  void truncate(size_t size) { nodes_.resize(size); }
  // A canonical byte string naming the state (equal states, equal keys): the mask cache's key.
  std::string key(const int32_t* heads, size_t n) const;
  // The state a key names, rebuilt in this arena (heads replaced).
  void from_key(std::string_view key, std::vector<int32_t>* heads);

  const Grammar& grammar() const { return g_; }

 private:
  struct Node {
    uint32_t pos;    // position in the grammar's flat symbols
    int32_t parent;  // the stack below (kAccepted at the bottom)
    uint64_t hash;   // of the whole chain, for deduplication
    uint32_t depth;
  };
  static constexpr int32_t kNone = -2;  // no pending alternative
  int32_t push(uint32_t pos, int32_t parent);
  void expand(int32_t head, std::vector<int32_t>* out, size_t first);
  int32_t next_pending(size_t base);  // the next alternative expand() set aside, pushed; kNone
  void begin_step();                  // before an initial() or advance(): marks, an empty seen-table
  bool seen_before(int32_t head);     // head's stack was found already this step (else remembers it)
  bool same_chain(int32_t a, int32_t b) const;
  uint64_t hash_of(int32_t head) const { return head < 0 ? 0x9e3779b97f4a7c15ull : nodes_[size_t(head)].hash; }

  const Grammar& g_;
  const FlatSymbol* sym_;
  const ByteSet* sets_;
  std::vector<Node> nodes_;
  std::vector<std::pair<uint32_t, int32_t>> pending_;  // alternatives (position, stack below) expand() will take
  size_t max_heads_, max_nodes_;
  size_t step_mark_ = 0;  // nodes_.size() when the current initial() or advance() began
  std::vector<std::pair<uint32_t, int32_t>> seen_;  // (stamp, head): this step's heads by hash
  uint32_t stamp_ = 0;
  bool overflowed_ = false;
};

}  // namespace ds::grammar
