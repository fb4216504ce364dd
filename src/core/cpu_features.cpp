#include "core/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace ds {

static CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (unsigned long long)hi << 32 | lo;
  }
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm_os && (b & (1u << 5));
  f.avx512f = zmm_os && (b & (1u << 16));
  f.avx512dq = zmm_os && (b & (1u << 17));
  f.avx512bw = zmm_os && (b & (1u << 30));
  f.avx512vl = zmm_os && (b & (1u << 31));
  f.avx512vnni = zmm_os && (c & (1u << 11));
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512bf16 = zmm_os && (a & (1u << 5));
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa active_isa() {
  static const Isa isa = [] {
    const CpuFeatures& f = cpu_features();
    Isa best = Isa::Scalar;
    if (f.avx2 && f.fma && f.f16c) best = Isa::Avx2;
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512bf16 && f.avx512vnni && f.fma)
      best = Isa::Avx512;
    if (const char* env = std::getenv("DS_ISA")) {
      Isa want = best;
      if (!std::strcmp(env, "scalar")) want = Isa::Scalar;
      else if (!std::strcmp(env, "avx2")) want = Isa::Avx2;
      if (int(want) < int(best)) best = want;
    }
    return best;
  }();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace ds
