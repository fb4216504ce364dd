#include "tokenizer/tokenizer.h"

#include <deque>

#include "core/error.h"
#include "tokenizer/tokenizer_data.h"

namespace ds {

namespace {
// Scratch entries a thread keeps between calls (a few hundred KiB at most).
constexpr std::size_t kScratchKeep = 1 << 14;
}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  const Data& d = *data_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  // Scratch reused across calls on this thread; encode is called per request and per turn.
  thread_local std::vector<AddedTokenMatcher::Segment> segments;
  thread_local std::vector<std::string_view> pieces;
  thread_local std::deque<std::string> scratch;
  segments.clear();
  d.added.split(text, allow_special, segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    pieces.clear();
    scratch.clear();
    d.pre.split(seg.text, scratch, pieces);
    for (std::string_view piece : pieces) {
      if (piece.size() > 1 && d.cache.lookup(piece, out)) continue;
      const std::size_t before = out.size();
      d.bpe.encode_piece(piece, out);
      if (piece.size() > 1) d.cache.insert(piece, std::span<const int32_t>(out).subspan(before));
    }
  }
  // A huge text would otherwise leave this thread's scratch at its size for the thread's life
  // (HTTP worker threads live long): past a bound it goes back to the allocator.
  if (segments.capacity() > kScratchKeep) std::vector<AddedTokenMatcher::Segment>().swap(segments);
  if (pieces.capacity() > kScratchKeep) std::vector<std::string_view>().swap(pieces);
  if (scratch.size() > kScratchKeep / 16) std::deque<std::string>().swap(scratch);
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  const Data& d = *data_;
  const auto n = static_cast<int32_t>(d.kind.size());
  if (id < 0 || id >= n) {
    throw Error("tokenizer " + d.source + ": token id " + std::to_string(id) + " is out of range [0, " +
                std::to_string(n) + ")");
  }
  if (d.kind[id] == TokenKind::kUndefined) {
    throw Error("tokenizer " + d.source + ": token id " + std::to_string(id) + " is inside [0, " + std::to_string(n) +
                ") but not defined by the file");
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Data& d = *data_;
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && d.kind[id] == TokenKind::kSpecial) continue;
    out += d.id_bytes[id];
  }
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return data_->id_bytes[id];
}

std::string Tokenizer::token_text(int32_t id) const { return std::string(token_bytes(id)); }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(data_->kind.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = data_->by_spelling.find(token);
  if (it == data_->by_spelling.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::defines(int32_t id) const {
  return id >= 0 && id < vocab_size() && data_->kind[id] != TokenKind::kUndefined;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && data_->kind[id] == TokenKind::kSpecial;
}

}  // namespace ds
