// Chained block hashes: a block's hash names its whole prefix.
#include "cache/block_hash.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(ha[1], chain_block_hash(ha[0], std::span<const int32_t>(a.data() + 4, 4)));
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
