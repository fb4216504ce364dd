// The state snapshot store: fixed buffers, keyed by block hash, least recently used evicted.
#include "cache/state_snapshots.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ds {
namespace {

void put(StateSnapshots& s, uint64_t h, int value) {
  void* dst = s.insert(h);
  ASSERT_NE(dst, nullptr);
  std::memcpy(dst, &value, sizeof value);
}
int get(StateSnapshots& s, uint64_t h) {
  const void* p = s.find(h);
  if (p == nullptr) return -1;
  int v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

TEST(StateSnapshots, SavesFindsAndEvictsLeastRecentlyUsed) {
  StateSnapshots s(2, sizeof(int));
  put(s, 10, 1);
  put(s, 20, 2);
  EXPECT_EQ(get(s, 10), 1);  // 10 is now the most recently used
  put(s, 30, 3);             // evicts 20
  EXPECT_EQ(s.num_evictions(), 1u);
  EXPECT_FALSE(s.contains(20));
  EXPECT_EQ(get(s, 20), -1);
  EXPECT_EQ(get(s, 10), 1);
  EXPECT_EQ(get(s, 30), 3);
  EXPECT_EQ(s.size(), 2);
}

TEST(StateSnapshots, InsertingAnExistingHashOverwritesInPlace) {
  StateSnapshots s(2, sizeof(int));
  put(s, 10, 1);
  put(s, 10, 5);
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(get(s, 10), 5);
}

TEST(StateSnapshots, EraseFreesTheBuffer) {
  StateSnapshots s(1, sizeof(int));
  put(s, 10, 1);
  s.erase(10);
  s.erase(999);  // absent: ignored
  EXPECT_EQ(s.size(), 0);
  put(s, 20, 2);
  EXPECT_EQ(s.num_evictions(), 0u);  // the erased buffer was reused, nothing evicted
  EXPECT_EQ(get(s, 20), 2);
}

TEST(StateSnapshots, StatelessModelHasEveryBoundaryAndStoresNothing) {
  StateSnapshots s(100, 0);
  EXPECT_TRUE(s.stateless());
  EXPECT_TRUE(s.contains(42));
  EXPECT_EQ(s.insert(42), nullptr);
  EXPECT_EQ(s.find(42), nullptr);
  EXPECT_EQ(s.capacity(), 0);
}

TEST(StateSnapshots, ZeroCapacityHoldsNothing) {
  StateSnapshots s(0, 64);
  EXPECT_EQ(s.insert(1), nullptr);
  EXPECT_FALSE(s.contains(1));
}

}  // namespace
}  // namespace ds
