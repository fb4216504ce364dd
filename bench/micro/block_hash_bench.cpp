// The prefix cache's block hash: keyed SHA-256 (what the chain uses) against plain XXH64 (what it
// used before), per block of 16, 64 and 256 tokens.
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <numeric>
#include <vector>

#include "cache/block_hash.h"

namespace {

void BM_BlockHashKeyedSha256(benchmark::State& st) {
  std::vector<int32_t> t(size_t(st.range(0)));
  std::iota(t.begin(), t.end(), 1);
  const ds::ChainKey k = ds::ChainKey::random();
  uint64_t h = 0;
  for (auto _ : st) benchmark::DoNotOptimize(h = ds::chain_block_hash(k, h, t));
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(t.size() * 4));
}
BENCHMARK(BM_BlockHashKeyedSha256)->Arg(16)->Arg(64)->Arg(256);

void BM_BlockHashXxh64(benchmark::State& st) {
  std::vector<int32_t> t(size_t(st.range(0)));
  std::iota(t.begin(), t.end(), 1);
  uint64_t h = 0;
  for (auto _ : st) benchmark::DoNotOptimize(h = XXH64(t.data(), t.size() * 4, h));
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(t.size() * 4));
}
BENCHMARK(BM_BlockHashXxh64)->Arg(16)->Arg(64)->Arg(256);

}  // namespace
