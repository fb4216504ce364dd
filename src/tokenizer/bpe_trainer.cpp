#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // Max-heap order: higher count first, then the smaller pair, which keys compare as
  // (left id, right id) lexicographically.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

nlohmann::ordered_json pre_tokenizer_json(const std::string& pattern) {
  using J = nlohmann::ordered_json;
  J split = {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  J byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return J{{"type", "Sequence"}, {"pretokenizers", J::array({split, byte_level})}};
}

}  // namespace

struct BpeTrainer::State {
  BpeTrainerOptions opt;
  BpeTrainerStats stats;
  nlohmann::ordered_json pre_json;
  PreTokenizer pre;
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> counts;
  bool trained = false;

  void count_chunk(std::string_view chunk) {
    thread_local std::deque<std::string> scratch;
    thread_local std::vector<std::string_view> pieces;
    scratch.clear();
    pieces.clear();
    pre.split(chunk, scratch, pieces);
    stats.pieces += static_cast<int64_t>(pieces.size());
    for (std::string_view p : pieces) {
      auto it = counts.find(p);
      if (it != counts.end()) {
        ++it->second;
      } else {
        counts.emplace(std::string(p), 1);
      }
    }
  }
};

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : s_(std::make_unique<State>()) {
  s_->opt = std::move(options);
  auto& opt = s_->opt;
  if (opt.split_pattern.empty()) opt.split_pattern = std::string(kGpt4SplitPattern);
  const auto n_special = static_cast<int>(opt.special_tokens.size());
  DS_CHECK(opt.vocab_size >= 256 + n_special,
           "tokenizer train: vocab size " + std::to_string(opt.vocab_size) + " is below 256 byte tokens + " +
               std::to_string(n_special) + " special tokens");
  DS_CHECK(opt.min_pair_count >= 1, "tokenizer train: min_pair_count must be at least 1");
  std::unordered_set<std::string> seen;
  const auto& bytes = byte_level::byte_strings();
  for (const auto& sp : opt.special_tokens) {
    DS_CHECK(!sp.empty(), "tokenizer train: a special token is empty");
    DS_CHECK(utf8::is_valid(sp), "tokenizer train: special token is not valid UTF-8: " + utf8::sanitize(sp));
    DS_CHECK(seen.insert(sp).second, "tokenizer train: special token given twice: " + sp);
    // A special spelled like a byte token would share its vocab key and so its id.
    DS_CHECK(std::find(bytes.begin(), bytes.end(), sp) == bytes.end(),
             "tokenizer train: special token '" + sp + "' is a single byte token; use a longer one");
  }
  s_->pre_json = pre_tokenizer_json(opt.split_pattern);
  s_->pre = tokenizer_json::parse_pre_tokenizer(nlohmann::json::parse(s_->pre_json.dump()), "trainer options");
}

BpeTrainer::~BpeTrainer() = default;

const BpeTrainerStats& BpeTrainer::stats() const { return s_->stats; }

void BpeTrainer::add_text(std::string_view text) {
  DS_CHECK(!s_->trained, "tokenizer train: add_text after train()");
  const auto t0 = Clock::now();
  s_->stats.bytes += static_cast<int64_t>(text.size());
  const auto& specials = s_->opt.special_tokens;
  // Next occurrence of each special at or after pos; refreshed only once pos passes it.
  std::vector<std::size_t> next(specials.size(), 0);
  std::vector<bool> fresh(specials.size(), false);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t best = std::string_view::npos, best_len = 0;
    for (std::size_t k = 0; k < specials.size(); ++k) {
      if (!fresh[k] || (next[k] != std::string_view::npos && next[k] < pos)) {
        next[k] = text.find(specials[k], pos);
        fresh[k] = true;
      }
      if (next[k] == std::string_view::npos) continue;
      if (next[k] < best || (next[k] == best && specials[k].size() > best_len)) {
        best = next[k];
        best_len = specials[k].size();
      }
    }
    if (best == std::string_view::npos) {
      s_->count_chunk(text.substr(pos));
      break;
    }
    if (best > pos) s_->count_chunk(text.substr(pos, best - pos));
    pos = best + best_len;
  }
  s_->stats.count_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string BpeTrainer::train() {
  DS_CHECK(!s_->trained, "tokenizer train: train() called twice");
  s_->trained = true;
  const auto t0 = Clock::now();
  auto& st = *s_;
  const auto& opt = st.opt;

  // Sorting the pieces makes word indices, and so every tie that could depend on them, a
  // function of the corpus alone, not of hash-map iteration order.
  std::vector<std::pair<std::string, int64_t>> sorted(st.counts.begin(), st.counts.end());
  st.counts.clear();
  std::sort(sorted.begin(), sorted.end());
  st.stats.unique_pieces = static_cast<int64_t>(sorted.size());

  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  // Words that contain (or once contained) each pair; stale entries are harmless, the merge
  // pass simply finds nothing in them.
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (std::size_t w = 0; w < sorted.size(); ++w) {
    const std::string& piece = sorted[w].first;
    freq[w] = sorted[w].second;
    auto& syms = words[w];
    syms.reserve(piece.size());
    for (char c : piece) syms.push_back(static_cast<unsigned char>(c));
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      const uint64_t p = pair_key(syms[i], syms[i + 1]);
      pair_count[p] += freq[w];
      auto& list = where[p];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  sorted.clear();
  sorted.shrink_to_fit();

  std::priority_queue<HeapEntry> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  std::vector<std::string> tok_bytes(256);
  for (int b = 0; b < 256; ++b) tok_bytes[b] = std::string(1, static_cast<char>(b));
  std::unordered_set<std::string> special_keys(opt.special_tokens.begin(), opt.special_tokens.end());
  std::vector<std::pair<int32_t, int32_t>> merges;
  const int target = opt.vocab_size - 256 - static_cast<int>(opt.special_tokens.size());

  std::vector<uint64_t> touched;
  while (static_cast<int>(merges.size()) < target && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    auto pc = pair_count.find(top.pair);
    const int64_t cur = pc == pair_count.end() ? 0 : pc->second;
    if (cur != top.count) {
      // A lower count means this entry is stale and the pair goes back in at its true count;
      // a higher one means a newer entry for it is already queued.
      if (cur > 0 && cur < top.count) heap.push({cur, top.pair});
      continue;
    }
    if (cur < opt.min_pair_count) break;
    const auto a = static_cast<int32_t>(top.pair >> 32), b = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
    std::string merged = tok_bytes[a] + tok_bytes[b];
    std::vector<uint32_t> ws = std::move(where[top.pair]);
    where.erase(top.pair);
    pair_count.erase(pc);
    // A token spelled like a special would share its vocab key; such a pair can never come
    // back (only pairs with the newest token gain counts), so dropping it is final.
    if (special_keys.count(byte_level::encode(merged))) continue;

    const auto c = static_cast<int32_t>(256 + merges.size());
    merges.emplace_back(a, b);
    tok_bytes.push_back(std::move(merged));

    std::sort(ws.begin(), ws.end());
    ws.erase(std::unique(ws.begin(), ws.end()), ws.end());
    touched.clear();
    for (uint32_t w : ws) {
      auto& s = words[w];
      const int64_t f = freq[w];
      auto add = [&](int32_t l, int32_t r, int64_t delta) {
        const uint64_t p = pair_key(l, r);
        if (delta > 0) {
          pair_count[p] += delta;
          auto& list = where[p];
          if (list.empty() || list.back() != w) list.push_back(w);
          touched.push_back(p);
        } else {
          auto it = pair_count.find(p);
          if (it != pair_count.end() && (it->second += delta) <= 0) pair_count.erase(it);
        }
      };
      const std::size_t n = s.size();
      std::size_t i = 0, j = 0;
      // In place, left to right, non-overlapping, as encoding applies a merge. The neighbour
      // on the left is read from the already rewritten prefix, so "a b a b" correctly turns
      // (b,a) into (c,a) and then (c,a) into (c,c).
      while (i < n) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          if (j > 0) {
            add(s[j - 1], a, -f);
            add(s[j - 1], c, f);
          }
          if (i + 2 < n) {
            add(b, s[i + 2], -f);
            add(c, s[i + 2], f);
          }
          s[j++] = c;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      s.resize(j);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t p : touched) {
      auto it = pair_count.find(p);
      if (it != pair_count.end() && it->second > 0) heap.push({it->second, p});
    }
  }

  st.stats.merges = static_cast<int>(merges.size());
  st.stats.vocab_size = 256 + st.stats.merges + static_cast<int>(opt.special_tokens.size());

  using J = nlohmann::ordered_json;
  J vocab = J::object();
  std::vector<std::string> mapped(tok_bytes.size());
  for (std::size_t id = 0; id < tok_bytes.size(); ++id) {
    mapped[id] = byte_level::encode(tok_bytes[id]);
    vocab[mapped[id]] = id;
  }
  J merge_list = J::array();
  // "left right" strings: every tokenizers release reads them (the [left, right] form is newer),
  // and a mapped token never contains a real space.
  for (const auto& [l, r] : merges) merge_list.push_back(mapped[l] + " " + mapped[r]);
  J added = J::array();
  for (std::size_t k = 0; k < opt.special_tokens.size(); ++k) {
    added.push_back({{"id", 256 + merges.size() + k},
                     {"content", opt.special_tokens[k]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  J out;
  out["version"] = "1.0";
  out["truncation"] = nullptr;
  out["padding"] = nullptr;
  out["added_tokens"] = std::move(added);
  out["normalizer"] = nullptr;
  out["pre_tokenizer"] = st.pre_json;
  out["post_processor"] = nullptr;
  out["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  out["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merge_list)}};
  st.stats.merge_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out.dump(2) + "\n";
}

std::string train_bpe_tokenizer_json(const std::vector<std::string>& texts, int vocab_size,
                                     const std::vector<std::string>& special_tokens) {
  BpeTrainerOptions opt;
  opt.vocab_size = vocab_size;
  opt.special_tokens = special_tokens;
  BpeTrainer trainer(std::move(opt));
  for (const auto& t : texts) trainer.add_text(t);
  return trainer.train();
}

}  // namespace ds
