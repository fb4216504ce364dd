// The append-only results ledger: entries chain by hash; any change to earlier bytes (an edited
// figure, a removed or reordered entry, a truncated line) is detected and nothing is appended.
#include "recipe/ledger.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "recipe_test_util.h"

namespace ds::recipe {
namespace {

using testing::read_text;
using testing::TempDir;

void write(const std::string& p, const std::string& text) { std::ofstream(p) << text; }

std::string three_entries(const TempDir& d) {
  const std::string p = (d.path / "ledger.jsonl").string();
  for (int i = 0; i < 3; ++i) append_ledger(p, {{"concurrency", 1 << i}, {"output_tok_s", 100.5 * (i + 1)}});
  return p;
}

void expect_refused(const std::string& p, const std::string& part) {
  try {
    append_ledger(p, {{"concurrency", 99}});
    FAIL() << "appended to a tampered ledger";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Ledger, AppendsAndReadsBack) {
  TempDir d("ledger_ok");
  const std::string p = three_entries(d);
  const auto entries = read_ledger(p);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2]["concurrency"], 4);
  EXPECT_DOUBLE_EQ(entries[1]["output_tok_s"].get<double>(), 201.0);
}

TEST(Ledger, EditedFigureIsDetected) {
  TempDir d("ledger_edit");
  const std::string p = three_entries(d);
  std::string t = read_text(p);
  t.replace(t.find("201.0"), 5, "999.0");  // entry 1's figure, made better
  write(p, t);
  expect_refused(p, "entry 1 (line 2) changed");
  EXPECT_THROW(read_ledger(p), Error);
}

TEST(Ledger, RemovedEntryIsDetected) {
  TempDir d("ledger_remove");
  const std::string p = three_entries(d);
  std::string t = read_text(p);
  const size_t a = t.find('\n') + 1, b = t.find('\n', a) + 1;
  t.erase(a, b - a);
  write(p, t);
  expect_refused(p, "entry 1 (line 2)");
}

TEST(Ledger, TruncatedLedgerIsDetected) {
  TempDir d("ledger_trunc");
  const std::string p = three_entries(d);
  std::string t = read_text(p);
  t.resize(t.size() - 10);
  write(p, t);
  expect_refused(p, "entry 2");
}

TEST(Ledger, RewrittenHashWithoutItsChainIsDetected) {
  // Editing a figure and recomputing only that line's hash breaks the next entry's link.
  TempDir d("ledger_rehash");
  const std::string p = three_entries(d);
  std::string t = read_text(p);
  const size_t a = t.find('\n') + 1, b = t.find('\n', a);
  nlohmann::json j = nlohmann::json::parse(t.substr(a, b - a));
  j["entry"]["output_tok_s"] = 999.0;
  j["hash"] = "0000";
  t.replace(a, b - a, j.dump());
  write(p, t);
  expect_refused(p, "entry 1 (line 2) changed");
}

// The chain's end is checked as its start is: an edit of the newest entry (the one a run just
// wrote, and the likeliest to be "corrected") is refused too, by reading and by appending.
TEST(Ledger, EditedLastEntryIsDetected) {
  TempDir d("ledger_edit_last");
  const std::string p = three_entries(d);
  std::string t = read_text(p);
  const size_t last = t.rfind('\n', t.size() - 2) + 1;
  const size_t at = t.find("301.5", last);
  ASSERT_NE(at, std::string::npos) << t;
  t.replace(at, 5, "999.5");  // entry 2's figure, made better
  write(p, t);
  expect_refused(p, "entry 2 (line 3) changed");
  EXPECT_THROW(read_ledger(p), Error);
}

// Lines of a ledger, each with its newline.
std::vector<std::string> lines_of(const std::string& t) {
  std::vector<std::string> out;
  for (size_t a = 0; a < t.size();) {
    const size_t b = t.find('\n', a) + 1;
    out.push_back(t.substr(a, b - a));
    a = b;
  }
  return out;
}
std::string joined(const std::vector<std::string>& lines) {
  std::string t;
  for (const auto& l : lines) t += l;
  return t;
}

// The last two entries swapped: as they were written, with their seq renumbered to fit their new
// places, and with seq and prev both rewritten (so only the hash can tell). Each is refused at
// the first line out of place.
TEST(Ledger, LastTwoEntriesReorderedAreDetected) {
  TempDir d("ledger_reorder");
  const std::string p = three_entries(d);
  const std::vector<std::string> good = lines_of(read_text(p));
  ASSERT_EQ(good.size(), 3u);
  auto swapped = [&](bool renumber, bool relink) {
    std::vector<std::string> l = good;
    std::swap(l[1], l[2]);
    std::string prev = nlohmann::json::parse(l[0])["hash"];
    for (int i = 1; i < 3; ++i) {
      nlohmann::json j = nlohmann::json::parse(l[size_t(i)]);
      if (renumber) j["seq"] = i;
      if (relink) j["prev"] = prev;
      prev = j["hash"];
      l[size_t(i)] = j.dump() + "\n";
    }
    return joined(l);
  };
  for (const auto& [renumber, relink, why] : std::vector<std::tuple<bool, bool, std::string>>{
           {false, false, "entry 1 (line 2) has seq 2"},
           {true, false, "entry 1 (line 2) does not follow the entry before it"},
           {true, true, "entry 1 (line 2) changed"}}) {
    SCOPED_TRACE(why);
    write(p, swapped(renumber, relink));
    expect_refused(p, why);
    EXPECT_THROW(read_ledger(p), Error);
  }
  // The same lines in their order are a good ledger: the checks above saw the order, nothing else.
  write(p, joined(good));
  EXPECT_EQ(read_ledger(p).size(), 3u);
}

// An entry nested a million levels deep once parsed, then overflowed the stack when the chain
// check dumped it to hash it (`recipe run` crashed on such a ledger). Parsing now refuses it,
// naming the limit, before anything walks it; so does every other deep shape.
TEST(Ledger, ADeeplyNestedEntryIsRefusedNamingTheLimit) {
  TempDir d("ledger_deep");
  const std::string p = three_entries(d);
  const std::string good = read_text(p);
  // The line links to the entry before it, so the old check got as far as hashing (dumping) it.
  const size_t last = good.rfind('\n', good.size() - 2) + 1;
  const std::string prev = nlohmann::json::parse(good.substr(last))["hash"];
  for (const std::string& deep : {std::string(1000000, '[') + std::string(1000000, ']'),
                                  [] {
                                    std::string s;
                                    for (int i = 0; i < 200000; ++i) s += "{\"a\":";
                                    return s + "1" + std::string(200000, '}');
                                  }(),
                                  std::string(1000000, '[')}) {  // unclosed, too
    write(p, good + R"({"seq":3,"prev":")" + prev + R"(","entry":)" + deep + R"(,"hash":"y"})" + "\n");
    try {
      read_ledger(p);
      FAIL() << "read a ledger with an entry nested " << deep.size() / 2 << " deep";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("entry 3 (line 4)"), std::string::npos) << m.substr(0, 300);
      EXPECT_NE(m.find("nests deeper than 256 levels"), std::string::npos) << m.substr(0, 300);
      EXPECT_LT(m.size(), 600u);  // the message does not carry the line
    }
    expect_refused(p, "nests deeper than 256 levels");
  }
  // Nesting up to the limit is an ordinary entry.
  write(p, good);
  nlohmann::json nested = 1;
  for (int i = 0; i < 250; ++i) nested = nlohmann::json::array({nested});
  append_ledger(p, {{"deep", nested}});
  EXPECT_EQ(read_ledger(p).size(), 4u);
}

}  // namespace
}  // namespace ds::recipe
