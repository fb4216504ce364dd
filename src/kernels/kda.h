// Kimi Delta Attention numerics for one head (docs/model-format.md, Numerics): the per-token recurrence
// used by decode, and the chunked (WY) form used by prefill. The recurrence is the reference;
// tests hold the chunked form to it.
//
// State S is [dk][dv] row-major f32. Inputs are token-major with strides in floats:
// q, k: [T][stride_qk] (dk used), v: [T][stride_v], g (log decay per key channel): [T][stride_g],
// beta: [T] at stride_beta. q must already be L2-normalised and scaled, k L2-normalised.
#pragma once
#include <cstddef>

namespace ds {

struct KdaHeadIo {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  size_t stride_qk, stride_v, stride_g, stride_beta;
  float* o;  // [T][stride_o], dv used
  size_t stride_o;

  // The same rows from token t on.
  KdaHeadIo advanced(int t) const {
    const size_t n = size_t(t);
    return {q + n * stride_qk, k + n * stride_qk, v + n * stride_v, g + n * stride_g,
            beta + n * stride_beta, stride_qk, stride_v, stride_g, stride_beta, o + n * stride_o,
            stride_o};
  }
};

constexpr int kKdaChunk = 64;

// Token by token: S = diag(exp g) S; S += beta k (v - S^T k)^T; o = S^T q. With AVX-512 and
// dv a multiple of 16 (up to 256) an explicit kernel (kda_avx512.cpp), else the plain form.
// Every path of a sequence (decode, verify, replay, short prefill pieces) runs this one
// function, so they agree bit for bit on a machine.
void kda_recurrent(float* S, int dk, int dv, int T, const KdaHeadIo& io);
// The plain form: the reference the AVX-512 kernel is tested against.
void kda_recurrent_plain(float* S, int dk, int dv, int T, const KdaHeadIo& io);
namespace detail {
// False (nothing done) for a shape it does not take.
bool kda_recurrent_avx512(float* S, int dk, int dv, int T, const KdaHeadIo& io);
}  // namespace detail

// The chunked form over chunks of kKdaChunk tokens; same result within float tolerance.
// scratch: kda_chunk_scratch_floats(dk, dv) floats.
size_t kda_chunk_scratch_floats(int dk, int dv);
void kda_chunked(float* S, int dk, int dv, int T, const KdaHeadIo& io, float* scratch);

// Causal depthwise conv + SiLU over T tokens of C channels, in place on x ([T][ldx]).
// w: [K][C] (tap-major, transposed from the checkpoint's [C][1][K] at load; K <= 8); state: the previous K-1 inputs [K-1][C], oldest first, updated to the last K-1.
// Zeros in the state stand for positions before the sequence start.
void causal_conv_silu(float* x, size_t ldx, int T, int C, const float* w, int K, float* state);

// g = a * softplus(g + dt_bias), in place on n channels of one head; a = -exp(A_log) < 0, the
// head's decay rate (computed once at load).
void kda_gate(float* g, const float* dt_bias, float a, int n);

}  // namespace ds
