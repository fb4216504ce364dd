// Microbenchmarks of the decode and prefill kernels. Figures, never assertions: run
// build/bench/micro/micro_bench and compare bytes/s to the machine's read bandwidth.
#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kernels/kda.h"
#include "kernels/matmul.h"

namespace ds {
namespace {

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// args: rows m, dtype (0 f32, 1 bf16), threads. A 2048x768 weight (one FFN projection).
void BM_Matmul(benchmark::State& st) {
  const int m = int(st.range(0)), n = 2048, k = 768;
  // Arg 1: 0 f32 weights, 1 bf16 weights (f32 activations), 2 bf16 weights with bf16 activations.
  const DType dt = st.range(1) ? DType::BF16 : DType::F32;
  ThreadPool pool(int(st.range(2)));
  auto w = randn(size_t(n) * k, 1);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  PackedWeight pw = dt == DType::BF16 ? pack_weight(wb.data(), dt, n, k) : pack_weight(w.data(), dt, n, k);
  if (st.range(1) == 2) set_activation_dtype(pw, ActivationDtype::BF16);
  auto x = randn(size_t(m) * k, 2);
  std::vector<float> y(size_t(m) * n);
  for (auto _ : st) {
    matmul(x.data(), k, pw, y.data(), n, m, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(double(pw.bytes()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Matmul)->ArgsProduct({{1, 2, 4, 8, 16, 32, 64}, {0, 1, 2}, {1, 2}})->UseRealTime();

// The same with a bf16 weight four times the L3 (16384 x 4096, 128 MiB), so every call streams it
// from memory, as a decode or verify step does: whether the FMAs of m rows hide behind the read.
// Args: rows m; 0 f32 activations, 1 bf16 activations; threads.
void BM_MatmulStream(benchmark::State& st) {
  const int m = int(st.range(0)), n = 16384, k = 4096;
  ThreadPool pool(int(st.range(2)));
  std::vector<uint16_t> wb(size_t(n) * k);
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(float(int(i % 251) - 125) * 1e-3f);
  PackedWeight pw = pack_weight(wb.data(), DType::BF16, n, k);
  if (st.range(1) == 1) set_activation_dtype(pw, ActivationDtype::BF16);
  auto x = randn(size_t(m) * k, 2);
  std::vector<float> y(size_t(m) * n);
  for (auto _ : st) {
    matmul(x.data(), k, pw, y.data(), n, m, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(double(pw.bytes()), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MatmulStream)->ArgsProduct({{1, 4, 8, 16}, {0, 1}, {2}})->UseRealTime();

// Decode attention of 12 heads over an MLA-style latent cache (row 288, value 256): context length.
void BM_DecodeAttention(benchmark::State& st) {
  const int ctx = int(st.range(0)), nq = 12, dk = 288, dv = 256, bs = 64;
  const int blocks = (ctx + bs - 1) / bs;
  auto pool = randn(size_t(blocks) * bs * dk, 3);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[size_t(b)] = b;
  PagedKv kv = PagedKv::f32(pool.data(), pool.data(), size_t(bs) * dk, size_t(dk), bs, table.data());
  auto q = randn(size_t(nq) * dk, 4);
  std::vector<float> out(size_t(nq) * dv), scratch(attention_scratch_floats(nq, dv, ctx));
  for (auto _ : st) {
    attention_decode(q.data(), nq, dk, dv, 0.1f, kv, ctx, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["kv_GB/s"] = benchmark::Counter(double(ctx) * dk * 4, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DecodeAttention)->Arg(512)->Arg(2048)->Arg(8192)->UseRealTime();

// Decode attention of one KV head of the llama layout (bench-100m-dense: 4 KV heads of 64, 3
// query heads each). Args: context; 0 = every head's rows of a token side by side (the layout
// before GQA blocks went head-major: this head's 256-byte rows 2 KiB apart, which the prefetcher
// loses) or 1 = this head's rows contiguous within each 64-token block (model/gqa_mixer.h); the
// KV dtype (0 f32, 1 bf16, 2 fp8, 3 bf16 with bf16 products).
void BM_DecodeAttentionGqaHead(benchmark::State& st) {
  const int ctx = int(st.range(0)), nq = 3, hd = 64, heads = 4, bs = 64;
  const bool head_major = st.range(1) != 0;
  const KvDtype dt = st.range(2) == 0 ? KvDtype::F32 : st.range(2) == 1 || st.range(2) == 3 ? KvDtype::BF16 : KvDtype::Fp8E4M3;
  const size_t es = kv_elem_bytes(dt), head_row = size_t(2 * hd) * es + (kv_has_scales(dt) ? 8 : 0);
  const int blocks = (ctx + bs - 1) / bs;
  std::vector<std::byte> pool(size_t(blocks) * bs * heads * head_row);
  auto vals = randn(size_t(2 * hd), 5);
  // This head (head 1) at its place in either layout.
  const size_t token_stride = head_major ? head_row : heads * head_row;
  const size_t head_at = head_major ? size_t(bs) * head_row : head_row;
  for (size_t i = 0; i < size_t(blocks) * bs * heads; ++i) {
    std::byte* r = pool.data() + i * head_row;
    float* sc = kv_has_scales(dt) ? reinterpret_cast<float*>(r + 2 * hd * es) : nullptr;
    kv_store_row(dt, vals.data(), hd, r, sc);
    kv_store_row(dt, vals.data() + hd, hd, r + hd * es, sc ? sc + 1 : nullptr);
  }
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[size_t(b)] = b;
  PagedKv kv;
  kv.k = pool.data() + head_at;
  kv.v = kv.k + hd * es;
  if (kv_has_scales(dt)) {
    kv.k_scale = kv.k + 2 * hd * es;
    kv.v_scale = kv.k_scale + 4;
  }
  kv.block_stride = size_t(bs) * heads * head_row;
  kv.token_stride = token_stride;
  kv.block_size = bs;
  kv.block_table = table.data();
  kv.dtype = dt;
  kv.bf16_products = st.range(2) == 3;
  auto q = randn(size_t(nq) * hd, 6);
  std::vector<float> out(size_t(nq) * hd), scratch(attention_scratch_floats(nq, hd, ctx));
  for (auto _ : st) {
    attention_decode(q.data(), nq, hd, hd, 0.125f, kv, ctx, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Bytes of this head's keys and values: what a bandwidth-bound kernel reads.
  st.counters["kv_GB/s"] = benchmark::Counter(double(ctx) * double(head_row), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["tokens/s"] = benchmark::Counter(double(ctx), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeAttentionGqaHead)->ArgsProduct({{512, 8192}, {0, 1}, {0, 1, 2, 3}})->UseRealTime();

// A decode or verify step's dense FFN on bench-100m-dense: 12 layers of gate and up (2048 x 768)
// and down (768 x 2048), bf16 with bf16 activations, 113 MB in all (over the L3), so each call
// streams its weight from memory as in a served step, with the calls' own overheads (rounding
// the activations, waking the pool). Args: rows m, threads.
void BM_FfnStream(benchmark::State& st) {
  const int m = int(st.range(0)), layers = 12, hidden = 768, inter = 2048;
  ThreadPool pool(int(st.range(1)));
  std::vector<uint16_t> wb(size_t(inter) * hidden);
  for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(float(int(i % 251) - 125) * 1e-3f);
  std::vector<PackedWeight> gate, up, down;
  size_t bytes = 0;
  for (int l = 0; l < layers; ++l) {
    gate.push_back(pack_weight(wb.data(), DType::BF16, inter, hidden));
    up.push_back(pack_weight(wb.data(), DType::BF16, inter, hidden));
    down.push_back(pack_weight(wb.data(), DType::BF16, hidden, inter));
    for (PackedWeight* w : {&gate.back(), &up.back(), &down.back()}) {
      set_activation_dtype(*w, ActivationDtype::BF16);
      bytes += w->bytes();
    }
  }
  auto x = randn(size_t(m) * hidden, 2);
  std::vector<float> g(size_t(m) * inter), u(size_t(m) * inter), y(size_t(m) * hidden);
  for (auto _ : st) {
    for (int l = 0; l < layers; ++l) {
      matmul(x.data(), size_t(hidden), gate[size_t(l)], g.data(), size_t(inter), m, &pool);
      matmul(x.data(), size_t(hidden), up[size_t(l)], u.data(), size_t(inter), m, &pool);
      matmul(g.data(), size_t(inter), down[size_t(l)], y.data(), size_t(hidden), m, &pool);
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * double(bytes / 2), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_FfnStream)->ArgsProduct({{1, 4, 8, 16, 32, 64}, {2}})->UseRealTime();

// A served decode step's GQA attention: `seqs` sequences of `ctx` tokens, bench-100m-dense's 4 KV
// heads of 64 (3 query heads each), head-major blocks scattered over a pool much larger than the
// L3, all (sequence, head) items split over 2 threads as the mixer does: what decode attention
// costs at concurrency, against the KV bytes it must read. Args: seqs, ctx, dtype (0 f32, 1 bf16,
// 2 bf16 with bf16 products as --activation-dtype bf16 runs it),
// huge pages (0: 4 KiB pages, 1: madvise(MADV_HUGEPAGE)), next item fetched (KvAhead: 0 off, 1 on,
// as the mixers run it).
void BM_DecodeAttentionServed(benchmark::State& st) {
  const int seqs = int(st.range(0)), ctx = int(st.range(1)), nq = 3, hd = 64, heads = 4, bs = 64;
  const KvDtype dt = st.range(2) == 0 ? KvDtype::F32 : KvDtype::BF16;
  const size_t es = kv_elem_bytes(dt), head_row = size_t(2 * hd) * es;
  const int per_seq = (ctx + bs - 1) / bs, blocks = seqs * per_seq;
  const size_t block_bytes = size_t(bs) * heads * head_row;
  // Like the model's pool: 2 MiB-aligned and offered transparent huge pages when arg 3 is 1.
  const size_t pool_bytes = (size_t(blocks) * block_bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  std::unique_ptr<std::byte, void (*)(void*)> mem(static_cast<std::byte*>(std::aligned_alloc(2u << 20, pool_bytes)), std::free);
  if (st.range(3)) madvise(mem.get(), pool_bytes, MADV_HUGEPAGE);
  std::span<std::byte> pool(mem.get(), pool_bytes);
  auto vals = randn(size_t(bs) * heads * 2 * hd, 5);
  for (int b = 0; b < blocks; ++b)
    for (int r = 0; r < bs * heads; ++r) {
      std::byte* row = pool.data() + size_t(b) * block_bytes + size_t(r) * head_row;
      kv_store_row(dt, vals.data() + size_t(r) * 2 * hd, hd, row, nullptr);
      kv_store_row(dt, vals.data() + size_t(r) * 2 * hd + hd, hd, row + hd * es, nullptr);
    }
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[size_t(b)] = int32_t((size_t(b) * 7919) % size_t(blocks));  // scattered
  auto q = randn(size_t(seqs) * heads * nq * hd, 6);
  std::vector<float> out(q.size());
  ThreadPool pool2(2);
  std::vector<std::vector<float>> scratch(2, std::vector<float>(attention_scratch_floats(nq, hd, ctx)));
  for (auto _ : st) {
    pool2.run([&](int thread, int nt) {
      const size_t n = size_t(seqs) * heads, b = n * size_t(thread) / size_t(nt), e = n * size_t(thread + 1) / size_t(nt);
      auto view = [&](size_t i) {
        const int s = int(i / heads), g = int(i % heads);
        PagedKv kv;
        kv.k = pool.data() + size_t(g) * bs * head_row;
        kv.v = kv.k + hd * es;
        kv.block_stride = block_bytes;
        kv.token_stride = head_row;
        kv.block_size = bs;
        kv.block_table = table.data() + size_t(s) * per_seq;
        kv.dtype = dt;
        kv.bf16_products = st.range(2) == 2;
        return kv;
      };
      const bool ahead = st.range(4) != 0;
      for (size_t i = b; i < e; ++i) {
        const PagedKv kv = view(i), next = view(i + 1);  // the item this thread takes next
        attention_decode(q.data() + i * nq * hd, nq, hd, hd, 0.125f, kv, ctx, out.data() + i * nq * hd,
                         scratch[size_t(thread)].data(), ahead && i + 1 < e ? &next : nullptr, ctx);
      }
    });
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["kv_GB/s"] = benchmark::Counter(double(seqs) * heads * ctx * double(head_row),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DecodeAttentionServed)->ArgsProduct({{1, 4, 16, 64, 256}, {640}, {0, 1, 2}, {0, 1}, {0, 1}})->UseRealTime();

KdaHeadIo head_io(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                  const std::vector<float>& g, const std::vector<float>& b, std::vector<float>& o, int d) {
  return {q.data(), k.data(), v.data(), g.data(), b.data(), size_t(d), size_t(d), size_t(d), 1, o.data(), size_t(d)};
}

// One KDA head (64 x 64 state): a decode step, and a 64-token chunk of prefill.
void BM_KdaStep(benchmark::State& st) {
  const int d = 64;
  auto q = randn(d, 1), k = randn(d, 2), v = randn(d, 3), g = randn(d, 4), b = randn(1, 5), S = randn(size_t(d) * d, 6);
  for (auto& x : g) x = -0.1f * std::abs(x);
  std::vector<float> o(d);
  for (auto _ : st) {
    kda_recurrent(S.data(), d, d, 1, head_io(q, k, v, g, b, o, d));
    benchmark::DoNotOptimize(o.data());
  }
}
BENCHMARK(BM_KdaStep);

void BM_KdaChunk(benchmark::State& st) {
  const int d = 64, T = int(st.range(0));
  auto q = randn(size_t(T) * d, 1), k = randn(size_t(T) * d, 2), v = randn(size_t(T) * d, 3), g = randn(size_t(T) * d, 4);
  auto b = randn(size_t(T), 5), S = randn(size_t(d) * d, 6);
  for (auto& x : g) x = -0.1f * std::abs(x);
  for (auto& x : b) x = 0.5f;
  std::vector<float> o(size_t(T) * d), scratch(kda_chunk_scratch_floats(d, d));
  for (auto _ : st) {
    kda_chunked(S.data(), d, d, T, head_io(q, k, v, g, b, o, d), scratch.data());
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["tokens/s"] = benchmark::Counter(double(T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KdaChunk)->Arg(64)->Arg(1024);

void BM_KdaRecurrentPrefill(benchmark::State& st) {
  const int d = 64, T = int(st.range(0));
  auto q = randn(size_t(T) * d, 1), k = randn(size_t(T) * d, 2), v = randn(size_t(T) * d, 3), g = randn(size_t(T) * d, 4);
  auto b = randn(size_t(T), 5), S = randn(size_t(d) * d, 6);
  for (auto& x : g) x = -0.1f * std::abs(x);
  std::vector<float> o(size_t(T) * d);
  for (auto _ : st) {
    kda_recurrent(S.data(), d, d, T, head_io(q, k, v, g, b, o, d));
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["tokens/s"] = benchmark::Counter(double(T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KdaRecurrentPrefill)->Arg(1024);

}  // namespace
}  // namespace ds
