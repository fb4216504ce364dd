// The instruction sets this CPU offers, read once at start-up; kernels dispatch on it.
#pragma once
#include <string>

namespace ds {

enum class Isa { Scalar, Avx2, Avx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false;
};

const CpuFeatures& cpu_features();
// Best ISA this CPU supports, lowered by DS_ISA=scalar|avx2|avx512 in the environment.
Isa active_isa();
const char* isa_name(Isa isa);

}  // namespace ds
