// Memory read bandwidth probe: the denominator of every decode-efficiency ratio we print.
#pragma once
#include <cstddef>

namespace ds {
class ThreadPool;
// Streams a buffer of `bytes` (far larger than the caches) `passes` times with `pool`'s threads,
// each reading its own contiguous part, and returns the best pass in GB/s (1e9 bytes).
double measure_read_bandwidth(size_t bytes, int passes, ThreadPool* pool);
}  // namespace ds
