// Seeded 64-bit mixing for everything the benchmark derives deterministically: token ids of a
// block, cache-bust namespaces, synthetic ids.
#pragma once
#include <cstdint>

namespace ds::bench {

// splitmix64's finaliser: a bijection on 64-bit values with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t mix64(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b + 0x632BE59BD9B4E019ull)); }

}  // namespace ds::bench
