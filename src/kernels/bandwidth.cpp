#include "kernels/bandwidth.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/simd.h"

namespace ds {

namespace {
// Eight independent sums keep enough loads in flight to saturate the memory system.
DS_MULTIVERSION float sum_floats(const float* p, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + size_t(j)];
  float s = 0.f;
  for (float a : acc) s += a;
  return s;
}
}  // namespace

double measure_read_bandwidth(size_t bytes, int passes, ThreadPool* pool) {
  const size_t n = bytes / sizeof(float) / 64 * 64;
  std::unique_ptr<float, void (*)(void*)> buf(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))), std::free);
  for (size_t i = 0; i < n; ++i) buf.get()[i] = float(i & 7);  // touch every page
  double best = 0;
  volatile float sink = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
    if (pool && pool->size() > 1) {
      float part[64] = {};
      pool->run([&](int t, int nt) {
        const size_t b = n / size_t(nt) * size_t(t) / 64 * 64, e = t + 1 == nt ? n : n / size_t(nt) * size_t(t + 1) / 64 * 64;
        part[t] = sum_floats(buf.get() + b, e - b);
      });
      for (int t = 0; t < pool->size(); ++t) total += part[t];
    } else {
      total = sum_floats(buf.get(), n);
    }
    sink = total;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(n * sizeof(float)) / s / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace ds
