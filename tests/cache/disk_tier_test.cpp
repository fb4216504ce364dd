// The disk tier: entries round-trip, the budget drops the oldest, a restart finds what was
// written, and a corrupt, truncated or mis-sized entry is a miss that removes the file.
#include "cache/disk_tier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace ds {
namespace {

namespace fs = std::filesystem;
using Kind = DiskTier::Kind;

struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = (fs::temp_directory_path() / ("ds_disk_tier_" + std::to_string(getpid()) + "_" + std::to_string(n++))).string();
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<int> payload(int seed, int n = 100) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = seed * 1000 + i;
  return v;
}

TEST(DiskTier, RoundTripsAndKeepsKindsApart) {
  TempDir d;
  DiskTier t(d.path, 1 << 20);
  const auto a = payload(1), b = payload(2);
  t.put(Kind::Block, 42, a.data(), a.size() * 4);
  t.put(Kind::State, 42, b.data(), b.size() * 4);
  EXPECT_TRUE(t.contains(Kind::Block, 42));
  EXPECT_FALSE(t.contains(Kind::Block, 43));
  std::vector<int> out(100);
  ASSERT_TRUE(t.get(Kind::Block, 42, out.data(), out.size() * 4));
  EXPECT_EQ(out, a);
  ASSERT_TRUE(t.get(Kind::State, 42, out.data(), out.size() * 4));
  EXPECT_EQ(out, b);
  EXPECT_FALSE(t.get(Kind::Block, 43, out.data(), out.size() * 4));
  EXPECT_EQ(t.entries(), 2u);
}

TEST(DiskTier, BudgetDropsTheOldestAndRestartReindexes) {
  TempDir d;
  const auto p = payload(3);
  const uint64_t entry = 40 + 400;  // header + payload
  {
    DiskTier t(d.path, 3 * entry);
    for (uint64_t h = 1; h <= 4; ++h) t.put(Kind::Block, h, p.data(), p.size() * 4);
    EXPECT_FALSE(t.contains(Kind::Block, 1));  // the oldest went first
    EXPECT_TRUE(t.contains(Kind::Block, 4));
    EXPECT_EQ(t.bytes_used(), 3 * entry);
  }
  DiskTier again(d.path, 3 * entry);
  EXPECT_EQ(again.entries(), 3u);
  std::vector<int> out(100);
  ASSERT_TRUE(again.get(Kind::Block, 3, out.data(), out.size() * 4));
  EXPECT_EQ(out, p);
  DiskTier smaller(d.path, 2 * entry);  // a smaller budget trims at start-up
  EXPECT_EQ(smaller.entries(), 2u);
}

TEST(DiskTier, CorruptTruncatedOrMisSizedEntriesAreMissesAndRemoved) {
  TempDir d;
  DiskTier t(d.path, 1 << 20);
  const auto p = payload(4);
  for (uint64_t h = 1; h <= 3; ++h) t.put(Kind::State, h, p.data(), p.size() * 4);
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(d.path)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  char name1[32], name2[32];
  std::snprintf(name1, sizeof name1, "s-%016x.dst", 1);
  std::snprintf(name2, sizeof name2, "s-%016x.dst", 2);
  {  // flip one payload byte of entry 1
    std::fstream f(d.path + "/" + name1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  fs::resize_file(d.path + "/" + name2, 200);  // truncate entry 2
  std::vector<int> out(100);
  EXPECT_FALSE(t.get(Kind::State, 1, out.data(), out.size() * 4));
  EXPECT_FALSE(t.get(Kind::State, 2, out.data(), out.size() * 4));
  EXPECT_FALSE(t.get(Kind::State, 3, out.data(), 200));  // asked for another size
  EXPECT_EQ(t.num_corrupt(), 3u);
  EXPECT_EQ(t.entries(), 0u);
  EXPECT_TRUE(fs::is_empty(d.path));
}

TEST(DiskTier, RefusesAFolderItCannotCreate) {
  EXPECT_THROW(DiskTier("/proc/ds-no-such-folder/x", 1 << 20), std::exception);
}

// The folder is untrusted: a link planted under the name the next write uses must not redirect
// it (before, fopen of the temporary name followed it and overwrote the link's target).
TEST(DiskTier, APlantedLinkDoesNotRedirectAWrite) {
  TempDir d;
  DiskTier t(d.path, 1 << 20);
  const std::string victim = d.path + "-victim";
  { std::ofstream(victim) << "precious"; }
  char name[40];
  std::snprintf(name, sizeof name, "b-%016x.dst.tmp", 7);
  fs::create_symlink(victim, d.path + "/" + name);
  std::snprintf(name, sizeof name, "s-%016x.dst", 7);
  fs::create_symlink(victim, d.path + "/" + name);  // and under the final name
  const auto p = payload(7);
  t.put(Kind::Block, 7, p.data(), p.size() * 4);
  t.put(Kind::State, 7, p.data(), p.size() * 4);
  std::string content;
  std::getline(std::ifstream(victim), content);
  EXPECT_EQ(content, "precious");
  std::vector<int> out(100);
  ASSERT_TRUE(t.get(Kind::Block, 7, out.data(), out.size() * 4));
  EXPECT_EQ(out, p);
  fs::remove(victim);
}

TEST(DiskTier, FilesAre0600AndTheFolder0700) {
  TempDir d;
  DiskTier t(d.path + "/sub", 1 << 20);
  const auto p = payload(8);
  t.put(Kind::Block, 8, p.data(), p.size() * 4);
  struct stat st{};
  ASSERT_EQ(::stat((d.path + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (auto& e : fs::directory_iterator(d.path + "/sub")) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << e.path();
  }
}

// One dangling link or a link loop once stopped start-up; anything but a regular file is skipped
// and counted, and the real entries are still found.
TEST(DiskTier, LinksAndOtherNonFilesAreSkippedAtStartUp) {
  TempDir d;
  const auto p = payload(9);
  { DiskTier t(d.path, 1 << 20); t.put(Kind::Block, 9, p.data(), p.size() * 4); }
  char name[32];
  std::snprintf(name, sizeof name, "b-%016x.dst", 10);
  fs::create_symlink(d.path + "/nowhere", d.path + "/" + name);  // dangling
  std::snprintf(name, sizeof name, "b-%016x.dst", 11);
  fs::create_symlink(d.path + "/" + name, d.path + "/" + name);  // a loop onto itself
  std::snprintf(name, sizeof name, "s-%016x.dst", 12);
  fs::create_directory(d.path + "/" + name);  // a folder with an entry's name
  DiskTier t(d.path, 1 << 20);
  EXPECT_EQ(t.entries(), 1u);
  EXPECT_EQ(t.num_skipped(), 3u);
  std::vector<int> out(100);
  EXPECT_TRUE(t.get(Kind::Block, 9, out.data(), out.size() * 4));
  EXPECT_FALSE(t.contains(Kind::Block, 10));
}

TEST(DiskTier, RefusesAFolderOthersCanWriteOrALink) {
  TempDir d;
  fs::create_directories(d.path + "/open");
  fs::permissions(d.path + "/open", fs::perms::all);  // 0777
  try {
    DiskTier t(d.path + "/open", 1 << 20);
    ADD_FAILURE() << "a world-writable folder was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("can be written by other users"), std::string::npos) << e.what();
  }
  fs::create_directories(d.path + "/real");
  fs::create_directory_symlink(d.path + "/real", d.path + "/link");
  try {
    DiskTier t(d.path + "/link", 1 << 20);
    ADD_FAILURE() << "a link was accepted as the folder";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds
