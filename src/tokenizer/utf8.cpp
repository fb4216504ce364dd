#include "tokenizer/utf8.h"

namespace ds::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// For a lead byte: sequence length and the allowed range of the second byte (Unicode Table 3-7),
// which is where overlongs, surrogates and out-of-range values are excluded.
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from s[pos] that form a valid prefix (possibly complete) of a sequence, and
// the full length that sequence needs. prefix == 0 means s[pos] cannot start one.
void scan(std::string_view s, std::size_t pos, int& prefix, int& need) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  const Lead lead = lead_of(b0);
  need = lead.len;
  if (lead.len <= 1) {
    prefix = lead.len;
    return;
  }
  prefix = 1;
  for (int i = 1; i < lead.len && pos + i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? lead.lo : 0x80, hi = i == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return;
    ++prefix;
  }
}

}  // namespace

bool next(std::string_view s, std::size_t& pos, char32_t& cp) {
  if (pos >= s.size()) return false;
  int prefix = 0, need = 0;
  scan(s, pos, prefix, need);
  if (prefix == 0 || prefix != need) return false;
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (need == 1) {
    cp = b0;
  } else {
    static constexpr unsigned char kLeadMask[5] = {0, 0, 0x1F, 0x0F, 0x07};
    cp = b0 & kLeadMask[need];
    for (int i = 1; i < need; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  }
  pos += static_cast<std::size_t>(need);
  return true;
}

bool is_valid(std::string_view s) {
  std::size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    if (!next(s, pos, cp)) return false;
  }
  return true;
}

std::size_t incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead byte among the last 3 can be incomplete.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const std::size_t pos = n - back;
    const auto b = static_cast<unsigned char>(s[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    int prefix = 0, need = 0;
    scan(s, pos, prefix, need);
    const bool proper_prefix = prefix > 1 || (prefix == 1 && need > 1);
    return proper_prefix && static_cast<std::size_t>(prefix) == back && prefix < need ? back : 0;
  }
  return 0;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    int prefix = 0, need = 0;
    scan(s, pos, prefix, need);
    if (prefix > 0 && prefix == need) {
      out.append(s.substr(pos, static_cast<std::size_t>(need)));
      pos += static_cast<std::size_t>(need);
    } else {
      out.append("\xEF\xBF\xBD");
      pos += static_cast<std::size_t>(prefix > 0 ? prefix : 1);
    }
  }
  return out;
}

}  // namespace ds::utf8
