// Chained block hashes: a block's hash names its whole prefix. The hashes are persisted (disk
// tier file names) and shared across processes, so the formula itself is pinned: the tests check
// against XXH64 called directly with the documented chaining (docs/prefix-cache.md:
// h_i = XXH64(tokens of block i as int32 bytes, seed = h_{i-1}), h_0 seeded by the model's seed)
// and against literal values, checked with an independent XXH64 written from the spec.
#include "cache/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <numeric>
#include <vector>

namespace ds {
namespace {

TEST(BlockHash, ChainNamesTheWholePrefix) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> b = a;
  b[1] = 99;  // differs in the first block only
  std::vector<uint64_t> ha, hb;
  extend_block_hashes(7, a, 4, &ha);
  extend_block_hashes(7, b, 4, &hb);
  ASSERT_EQ(ha.size(), 2u);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);  // same second block, different history
}

TEST(BlockHash, ChainIsXxh64SeededByTheParent) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two full blocks of 4 and a partial
  std::vector<uint64_t> h;
  extend_block_hashes(7, t, 4, &h);
  ASSERT_EQ(h.size(), 2u);
  const uint64_t h0 = XXH64(t.data(), 4 * sizeof(int32_t), 7);
  const uint64_t h1 = XXH64(t.data() + 4, 4 * sizeof(int32_t), h0);
  EXPECT_EQ(h[0], h0);
  EXPECT_EQ(h[1], h1);
  // The same values as literals: a change of seed, byte width, chaining order or hash function
  // changes them, which would orphan every block already written to disk.
  EXPECT_EQ(h[0], 0x180fb97e3b9c3a94ull);
  EXPECT_EQ(h[1], 0xf256cc9c661eb60bull);
  EXPECT_EQ(chain_block_hash(7, std::span<const int32_t>(t.data(), 4)), 0x180fb97e3b9c3a94ull);
  // Token ids are hashed as their 4 bytes, negative and large ones included.
  const int32_t odd[] = {0x7fffffff, -1, 151643};
  EXPECT_EQ(chain_block_hash(0, odd), 0x94245a5d173f89c1ull);
  // A 64-token block (the default block size): 256 bytes, past XXH64's 32-byte stripes.
  std::vector<int32_t> big(64);
  std::iota(big.begin(), big.end(), 100);
  EXPECT_EQ(chain_block_hash(7, big), 0x0de8cc23ae8f64c1ull);
}

TEST(BlockHash, SeedIsXxh64OfTheIdentityWithTheDeltaserveSeed) {
  const uint64_t id[] = {1, 2};
  EXPECT_EQ(block_hash_seed(id), XXH64(id, sizeof id, 0x64656c7461736576ull));  // "deltasev"
  EXPECT_EQ(block_hash_seed(id), 0xeadd5936edfa540cull);
  std::vector<uint64_t> h;
  extend_block_hashes(block_hash_seed(id), std::vector<int32_t>{1, 2, 3, 4}, 4, &h);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], 0x3a02d97b44d87bd8ull);
}

TEST(BlockHash, SeedSeparatesModels) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<uint64_t> h1, h2;
  const uint64_t id1[] = {1, 2}, id2[] = {1, 3};
  extend_block_hashes(block_hash_seed(id1), a, 4, &h1);
  extend_block_hashes(block_hash_seed(id2), a, 4, &h2);
  EXPECT_NE(h1[0], h2[0]);
}

TEST(BlockHash, ExtendOnlyHashesFullBlocksAndKeepsEarlierOnes) {
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  std::vector<uint64_t> h;
  extend_block_hashes(0, t, 4, &h);
  ASSERT_EQ(h.size(), 1u);
  const uint64_t first = h[0];
  t.push_back(7);
  t.push_back(8);
  extend_block_hashes(0, t, 4, &h);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], first);
  std::vector<uint64_t> fresh;
  extend_block_hashes(0, t, 4, &fresh);
  EXPECT_EQ(fresh, h);
}

}  // namespace
}  // namespace ds
