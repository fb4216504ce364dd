#include "cache/block_pool.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(BlockPool, AllocateReleaseAndRefcounts) {
  BlockPool p(4, 64);
  EXPECT_EQ(p.num_free(), 4);
  EXPECT_EQ(p.blocks_for(0), 0);
  EXPECT_EQ(p.blocks_for(64), 1);
  EXPECT_EQ(p.blocks_for(65), 2);
  int32_t a = p.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(p.refcount(a), 1);
  p.retain(a);
  p.release(a);
  EXPECT_EQ(p.num_used(), 1);  // still held once
  p.release(a);
  EXPECT_EQ(p.num_used(), 0);
  EXPECT_DOUBLE_EQ(p.usage(), 0.0);
}

TEST(BlockPool, AllOrNothing) {
  BlockPool p(3, 64);
  std::vector<int32_t> ids;
  EXPECT_FALSE(p.allocate(4, &ids));
  EXPECT_TRUE(ids.empty());
  EXPECT_TRUE(p.allocate(3, &ids));
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(p.allocate(), -1);
  EXPECT_DOUBLE_EQ(p.usage(), 1.0);
  p.release_all(&ids);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(p.num_free(), 3);
}

}  // namespace
}  // namespace ds
