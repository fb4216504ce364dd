// DS_ISA lowers the kernels' instruction set (src/core/cpu_features.cpp). ctest runs the kernel
// and model tests once more under DS_ISA=avx2 and DS_ISA=scalar (tests/CMakeLists.txt); this
// test is what proves those runs took the path they are named after, rather than silently
// testing AVX-512 again (a misspelt value is ignored by design, so nothing else would notice).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/cpu_features.h"

namespace ds {
namespace {

TEST(Isa, ActiveIsaIsTheBestTheCpuHasLoweredByDsIsa) {
  const CpuFeatures& f = cpu_features();
  Isa best = Isa::Scalar;
  if (f.avx2 && f.fma && f.f16c) best = Isa::Avx2;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512bf16 && f.avx512vnni && f.fma) best = Isa::Avx512;
  const char* env = std::getenv("DS_ISA");
  const std::string want = env ? env : "";
  // Under ctest's ISA entries the value must be one the code knows; a typo there would make
  // the entry a silent duplicate of the default run.
  if (want.empty()) {
    EXPECT_EQ(isa_name(active_isa()), std::string(isa_name(best)));
  } else if (want == "scalar") {
    EXPECT_EQ(isa_name(active_isa()), std::string("scalar"));
  } else if (want == "avx2") {
    EXPECT_EQ(isa_name(active_isa()), std::string(best == Isa::Scalar ? "scalar" : "avx2"));
  } else if (want == "avx512") {
    EXPECT_EQ(isa_name(active_isa()), std::string(isa_name(best)));
  } else {
    ADD_FAILURE() << "DS_ISA=" << want << " is not one of scalar, avx2, avx512";
  }
}

}  // namespace
}  // namespace ds
