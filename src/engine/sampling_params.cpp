#include "engine/sampling_params.h"

namespace ds {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

double uniform_at(uint64_t seed, uint64_t position) {
  // splitmix64's output at index `position` of the sequence keyed by a mixed seed: its finalizer
  // over a Weyl sequence, which passes BigCrush as a counter-based generator.
  uint64_t key = seed;
  const uint64_t base = splitmix64(key);
  uint64_t x = base + position * 0x9e3779b97f4a7c15ull;
  return double(splitmix64(x) >> 11) * 0x1.0p-53;
}

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

}  // namespace ds
