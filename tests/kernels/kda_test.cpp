#include "kernels/kda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/elementwise.h"

namespace ds {
namespace {

struct Inputs {
  int T, dk, dv;
  std::vector<float> q, k, v, g, beta;
};

Inputs make_inputs(int T, int dk, int dv, float decay_scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  Inputs in{T, dk, dv, {}, {}, {}, {}, {}};
  in.q.resize(size_t(T) * dk);
  in.k.resize(size_t(T) * dk);
  in.v.resize(size_t(T) * dv);
  in.g.resize(size_t(T) * dk);
  in.beta.resize(size_t(T));
  for (auto& x : in.q) x = nd(rng);
  for (auto& x : in.k) x = nd(rng);
  for (auto& x : in.v) x = nd(rng);
  for (auto& x : in.g) x = -decay_scale * ud(rng);
  for (auto& x : in.beta) x = ud(rng);
  for (int t = 0; t < T; ++t) {
    l2norm_scale(&in.q[size_t(t) * dk], dk, 1e-6f, 1.f / std::sqrt(float(dk)));
    l2norm_scale(&in.k[size_t(t) * dk], dk, 1e-6f, 1.f);
  }
  return in;
}

KdaHeadIo io_of(const Inputs& in, float* o) {
  return {in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
          size_t(in.dk), size_t(in.dv), size_t(in.dk), 1, o, size_t(in.dv)};
}

TEST(Kda, ChunkedMatchesRecurrence) {
  for (int T : {1, 5, 63, 64, 65, 130, 200})
    for (float decay : {0.05f, 1.f, 8.f}) {
      const int dk = 32, dv = 48;
      Inputs in = make_inputs(T, dk, dv, decay, unsigned(T * 10 + decay * 3));
      std::vector<float> S0(size_t(dk) * dv);
      std::mt19937 rng(1);
      std::normal_distribution<float> nd(0.f, 0.3f);
      for (auto& x : S0) x = nd(rng);
      std::vector<float> S_rec = S0, S_chk = S0;
      std::vector<float> o_rec(size_t(T) * dv), o_chk(size_t(T) * dv);
      kda_recurrent(S_rec.data(), dk, dv, T, io_of(in, o_rec.data()));
      std::vector<float> scratch(kda_chunk_scratch_floats(dk, dv));
      kda_chunked(S_chk.data(), dk, dv, T, io_of(in, o_chk.data()), scratch.data());
      for (size_t i = 0; i < o_rec.size(); ++i)
        ASSERT_NEAR(o_chk[i], o_rec[i], 2e-4f + 1e-4f * std::fabs(o_rec[i])) << "T=" << T << " decay=" << decay << " i=" << i;
      for (size_t i = 0; i < S_rec.size(); ++i)
        ASSERT_NEAR(S_chk[i], S_rec[i], 2e-4f + 1e-4f * std::fabs(S_rec[i])) << "T=" << T << " state " << i;
    }
}

// The dispatched recurrence (the AVX-512 kernel where the CPU and dv allow it, else the plain
// form itself) against the plain form: per element the same operations in the same order, the
// decay's exp aside, so outputs and states agree to a few ulp of float. T tokens in one call
// must also equal T one-token calls bit for bit: decode, verify and replay step one token at a
// time while a short prefill piece runs several in one call.
TEST(Kda, RecurrenceMatchesPlainFormAndSteps) {
  for (int dv : {16, 48, 64, 128, 256, 40})
    for (int dk : {64, 32, 7}) {
      const int T = 9;
      Inputs in = make_inputs(T, dk, dv, 1.f, unsigned(dv * 131 + dk));
      std::vector<float> S0(size_t(dk) * dv);
      std::mt19937 rng(2);
      std::normal_distribution<float> nd(0.f, 0.3f);
      for (auto& x : S0) x = nd(rng);
      std::vector<float> S_fast = S0, S_plain = S0, S_step = S0;
      std::vector<float> o_fast(size_t(T) * dv), o_plain(o_fast.size()), o_step(o_fast.size());
      kda_recurrent(S_fast.data(), dk, dv, T, io_of(in, o_fast.data()));
      kda_recurrent_plain(S_plain.data(), dk, dv, T, io_of(in, o_plain.data()));
      const KdaHeadIo io = io_of(in, o_step.data());
      for (int t = 0; t < T; ++t) kda_recurrent(S_step.data(), dk, dv, 1, io.advanced(t));
      for (size_t i = 0; i < o_fast.size(); ++i) {
        ASSERT_NEAR(o_fast[i], o_plain[i], 1e-5f + 1e-5f * std::fabs(o_plain[i])) << "dv=" << dv << " dk=" << dk << " i=" << i;
        ASSERT_EQ(o_step[i], o_fast[i]) << "dv=" << dv << " dk=" << dk << " i=" << i;
      }
      for (size_t i = 0; i < S_fast.size(); ++i) {
        ASSERT_NEAR(S_fast[i], S_plain[i], 1e-5f + 1e-5f * std::fabs(S_plain[i])) << "dv=" << dv << " dk=" << dk << " state " << i;
        ASSERT_EQ(S_step[i], S_fast[i]) << "dv=" << dv << " dk=" << dk << " state " << i;
      }
    }
}

TEST(Kda, ConvMatchesNaiveAcrossSplits) {
  const int C = 70, K = 4, T = 9;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(T) * C), w(size_t(K) * C);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  // Naive: zeros before the start.
  std::vector<float> want(size_t(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      float acc = 0;
      for (int j = 0; j < K; ++j) {
        int pos = t - (K - 1) + j;
        if (pos >= 0) acc += w[size_t(j) * C + c] * x[size_t(pos) * C + c];
      }
      want[size_t(t) * C + c] = acc / (1.f + std::exp(-acc));
    }
  // Fed as 2 + 1 + 6 tokens, the state carries the history across calls.
  std::vector<float> got = x, state(size_t(K - 1) * C, 0.f);
  causal_conv_silu(got.data(), C, 2, C, w.data(), K, state.data());
  causal_conv_silu(got.data() + 2 * C, C, 1, C, w.data(), K, state.data());
  causal_conv_silu(got.data() + 3 * C, C, 6, C, w.data(), K, state.data());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << i;
  for (int h = 0; h < K - 1; ++h)
    for (int c = 0; c < C; ++c) ASSERT_EQ(state[size_t(h) * C + c], x[size_t(T - (K - 1) + h) * C + c]);
}

TEST(Kda, GateIsNegativeSoftplusScaled) {
  std::vector<float> g = {-30.f, -1.f, 0.f, 2.f, 40.f};
  std::vector<float> bias = {0.f, 0.5f, 0.f, -1.f, 0.f};
  std::vector<float> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = -std::exp(0.3f) * std::log1p(std::exp(double(g[i] + bias[i])));
  kda_gate(g.data(), bias.data(), -std::exp(0.3f), int(g.size()));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-5f * (1 + std::fabs(want[i])));
}

}  // namespace
}  // namespace ds
