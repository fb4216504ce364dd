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

TEST(BlockPool, PublishedBlocksStayFindableAfterReleaseUntilEvicted) {
  BlockPool p(3, 64);
  const int32_t a = p.allocate(), b = p.allocate();
  EXPECT_TRUE(p.publish(a, 111));
  EXPECT_TRUE(p.publish(b, 222));
  EXPECT_FALSE(p.publish(a, 333));  // already published
  EXPECT_EQ(p.find(111), a);
  EXPECT_EQ(p.num_cached(), 2);
  p.release(a);
  p.release(b);
  // Cached blocks nobody holds count as free: allocate() may evict them.
  EXPECT_EQ(p.num_free(), 3);
  EXPECT_EQ(p.num_evictable(), 2);
  EXPECT_EQ(p.num_used(), 0);
  EXPECT_EQ(p.find(222), b);
  // acquire() revives a cached block: it leaves the eviction order.
  EXPECT_EQ(p.acquire(222), b);
  EXPECT_EQ(p.refcount(b), 1);
  EXPECT_EQ(p.num_evictable(), 1);
  EXPECT_EQ(p.acquire(999), -1);
  // The never-used block goes first, then the oldest cached one (a), never the held b.
  const int32_t c = p.allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(p.num_evictions(), 0u);
  EXPECT_EQ(p.allocate(), a);
  EXPECT_EQ(p.num_evictions(), 1u);
  EXPECT_EQ(p.find(111), -1);  // its hash went with it
  EXPECT_EQ(p.allocate(), -1);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedFirst) {
  BlockPool p(4, 64);
  std::vector<int32_t> ids;
  ASSERT_TRUE(p.allocate(4, &ids));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(ids[size_t(i)], uint64_t(100 + i)));
  p.release(ids[2]);
  p.release(ids[0]);
  p.release(ids[3]);
  p.release(ids[1]);
  EXPECT_EQ(p.allocate(), ids[2]);
  EXPECT_EQ(p.allocate(), ids[0]);
  // Taking one back and releasing it again makes it the newest.
  EXPECT_EQ(p.acquire(103), ids[3]);
  p.release(ids[3]);
  EXPECT_EQ(p.allocate(), ids[1]);
  EXPECT_EQ(p.allocate(), ids[3]);
}

TEST(BlockPool, ReleaseAllFreesDeepestBlockFirstSoSharedPrefixesLastLonger) {
  BlockPool p(3, 64);
  std::vector<int32_t> seq;
  ASSERT_TRUE(p.allocate(3, &seq));
  const std::vector<int32_t> ids = seq;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.publish(ids[size_t(i)], uint64_t(7 + i)));
  p.release_all(&seq);
  EXPECT_EQ(p.allocate(), ids[2]);
  EXPECT_EQ(p.allocate(), ids[1]);
  EXPECT_EQ(p.allocate(), ids[0]);
}

TEST(BlockPool, SecondCopyOfAHashStaysPrivateAndIsFreedPlainly) {
  BlockPool p(2, 64);
  const int32_t a = p.allocate(), b = p.allocate();
  EXPECT_TRUE(p.publish(a, 5));
  EXPECT_FALSE(p.publish(b, 5));  // two sequences computed the same prefix at once
  EXPECT_FALSE(p.is_published(b));
  p.release(b);
  EXPECT_EQ(p.num_evictable(), 0);  // b went to the plain free list
  EXPECT_EQ(p.find(5), a);
}

}  // namespace
}  // namespace ds
