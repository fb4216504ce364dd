// Function multi-versioning for plain loops: GCC compiles the function for AVX-512 (x86-64-v4),
// AVX2 (x86-64-v3) and the baseline, and picks one at load time from the CPU. Hand-written
// intrinsics kernels live in *_avx512.cpp / *_avx2.cpp instead (see cmake/Modules.cmake).
#pragma once

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DS_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DS_MULTIVERSION
#endif
