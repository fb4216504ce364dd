// Small AVX-512 helpers the attention kernels share (decode and prefill): a mask of the first
// lanes, and exp_fast 16 lanes at a time. Include only from *_avx512.cpp files.
#pragma once
#include <immintrin.h>

namespace ds::detail {

// The first `left` of 16 lanes (none for left <= 0, all from 16 up).
inline __mmask16 tail_mask(int left) {
  return left <= 0 ? __mmask16(0) : left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
}

// The first `left` of 32 16-bit lanes.
inline __mmask32 tail_mask32(int left) {
  return left <= 0 ? __mmask32(0) : left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1u);
}

// exp_fast (kernels/fast_math.h) 16 lanes at a time: the same range reduction and polynomial.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 magic = _mm512_set1_ps(12582912.f);
  const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
  const __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x));
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

}  // namespace ds::detail
