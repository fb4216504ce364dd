// Chained block hashes: a block's hash names its whole prefix. The hashes are persisted (disk
// tier file names), so the formula itself is pinned (cache/block_hash.h, docs/prefix-cache.md):
// h_i = first 8 bytes, little-endian, of SHA-256(key || h_{i-1} as 8 LE bytes || tokens of block
// i as int32 LE), h_0's parent the model's seed. The tests check against SHA-256 computed here
// through OpenSSL's one-shot call over the concatenation, and against literal values computed
// with Python's hashlib from the same spec (key = bytes 0..31).
#include "cache/block_hash.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

namespace ds {
namespace {

ChainKey test_key() {
  ChainKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = uint8_t(i);
  return k;
}

// The spec, written out: one SHA-256 over the concatenated bytes.
uint64_t spec_hash(const ChainKey& key, uint64_t parent, const int32_t* toks, size_t n) {
  std::vector<unsigned char> buf(key.bytes.begin(), key.bytes.end());
  for (int i = 0; i < 8; ++i) buf.push_back(static_cast<unsigned char>(parent >> (8 * i)));
  for (size_t t = 0; t < n; ++t)
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<unsigned char>(uint32_t(toks[t]) >> (8 * i)));
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(buf.data(), buf.size(), d);
  uint64_t h = 0;
  for (int i = 7; i >= 0; --i) h = h << 8 | d[i];
  return h;
}

TEST(BlockHash, ChainNamesTheWholePrefix) {
  const ChainKey k = test_key();
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> b = a;
  b[1] = 99;  // differs in the first block only
  std::vector<uint64_t> ha, hb;
  extend_block_hashes(k, 7, a, 4, &ha);
  extend_block_hashes(k, 7, b, 4, &hb);
  ASSERT_EQ(ha.size(), 2u);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);  // same second block, different history
}

TEST(BlockHash, ChainIsKeyedSha256OfParentAndTokens) {
  const ChainKey k = test_key();
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two full blocks of 4 and a partial
  std::vector<uint64_t> h;
  extend_block_hashes(k, 7, t, 4, &h);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], spec_hash(k, 7, t.data(), 4));
  EXPECT_EQ(h[1], spec_hash(k, h[0], t.data() + 4, 4));
  // The same values as literals (Python hashlib): a change of key use, byte width, chaining
  // order or hash function changes them, which would orphan every block already on disk.
  EXPECT_EQ(h[0], 0x6cb9dd38be3f8dc1ull);
  EXPECT_EQ(h[1], 0xceab3025b7a92fc8ull);
  // Token ids are hashed as their 4 bytes, negative and large ones included.
  const int32_t odd[] = {0x7fffffff, -1, 151643};
  EXPECT_EQ(chain_block_hash(k, 0, odd), 0xae8a60e7b4e08d26ull);
  // A 64-token block (the default block size): 256 bytes, several SHA-256 blocks.
  std::vector<int32_t> big(64);
  std::iota(big.begin(), big.end(), 100);
  EXPECT_EQ(chain_block_hash(k, 7, big), 0xf411302d3173a6cfull);
}

TEST(BlockHash, AnotherKeyGivesOtherHashes) {
  ChainKey k2 = test_key();
  k2.bytes[31] ^= 1;
  const int32_t t[] = {1, 2, 3, 4};
  EXPECT_NE(chain_block_hash(test_key(), 7, t), chain_block_hash(k2, 7, t));
  EXPECT_NE(ChainKey::random().bytes, ChainKey::random().bytes);
}

TEST(BlockHash, SeedIsXxh64OfTheIdentityWithTheDeltaserveSeed) {
  const uint64_t id[] = {1, 2};
  EXPECT_EQ(block_hash_seed(id), XXH64(id, sizeof id, 0x64656c7461736576ull));  // "deltasev"
  EXPECT_EQ(block_hash_seed(id), 0xeadd5936edfa540cull);
  std::vector<uint64_t> h;
  extend_block_hashes(test_key(), block_hash_seed(id), std::vector<int32_t>{1, 2, 3, 4}, 4, &h);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], 0xb8efbf38e41e12e5ull);
}

TEST(BlockHash, SeedSeparatesModels) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<uint64_t> h1, h2;
  const uint64_t id1[] = {1, 2}, id2[] = {1, 3};
  extend_block_hashes(test_key(), block_hash_seed(id1), a, 4, &h1);
  extend_block_hashes(test_key(), block_hash_seed(id2), a, 4, &h2);
  EXPECT_NE(h1[0], h2[0]);
}

TEST(BlockHash, ExtendOnlyHashesFullBlocksAndKeepsEarlierOnes) {
  const ChainKey k = test_key();
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  std::vector<uint64_t> h;
  extend_block_hashes(k, 0, t, 4, &h);
  ASSERT_EQ(h.size(), 1u);
  const uint64_t first = h[0];
  t.push_back(7);
  t.push_back(8);
  extend_block_hashes(k, 0, t, 4, &h);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], first);
  std::vector<uint64_t> fresh;
  extend_block_hashes(k, 0, t, 4, &fresh);
  EXPECT_EQ(fresh, h);
}

TEST(BlockHash, AStoredKeyIsReadBackAndPrivate) {
  const std::string path = (std::filesystem::temp_directory_path() / ("ds_chain_key_" + std::to_string(getpid()))).string();
  std::filesystem::remove(path);
  const ChainKey a = ChainKey::load_or_create(path);
  EXPECT_EQ(ChainKey::load_or_create(path).bytes, a.bytes);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A damaged key is replaced: entries under the old one become misses, the server starts.
  std::filesystem::resize_file(path, 5);
  const ChainKey b = ChainKey::load_or_create(path);
  EXPECT_NE(b.bytes, a.bytes);
  EXPECT_EQ(std::filesystem::file_size(path), 32u);
  EXPECT_EQ(ChainKey::load_or_create(path).bytes, b.bytes);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ds
