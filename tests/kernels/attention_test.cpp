#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/kv_format.h"

namespace ds {
namespace {

TEST(Attention, SplitKvMergeMatchesNaive) {
  // A shuffled block table and a row wider than the key exercise the paging arithmetic.
  for (int n_ctx : {1, 37, 256, 257, 700, 1500}) {
    const int nq = 4, dk = 40, dv = 24, bs = 64, row = 72;
    const int blocks = (n_ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = (b * 7 + 3) % (blocks + 5);
    std::mt19937 rng(n_ctx);
    std::normal_distribution<float> nd;
    std::vector<float> pool(size_t(blocks + 5) * bs * row);
    for (auto& x : pool) x = nd(rng);
    // values after the keys in the same row
    PagedKv kv = PagedKv::f32(pool.data(), pool.data() + dk, size_t(bs) * row, size_t(row), bs, table.data());
    std::vector<float> q(size_t(nq) * dk);
    for (auto& x : q) x = nd(rng);
    std::vector<float> out(size_t(nq) * dv), ref(size_t(nq) * dv);
    std::vector<float> scratch(attention_scratch_floats(nq, dv, n_ctx));
    attention_decode(q.data(), nq, dk, dv, 0.3f, kv, n_ctx, out.data(), scratch.data());
    attention_reference(q.data(), nq, dk, dv, 0.3f, kv, n_ctx, ref.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f) << "n_ctx=" << n_ctx << " i=" << i;
  }
}

TEST(Attention, MergeOfTwoHalvesEqualsWhole) {
  const int nq = 2, dk = 16, dv = 8, n = 300;
  std::vector<int32_t> table = {0, 1, 2, 3, 4};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> kp(size_t(5) * 64 * dk);
  for (auto& x : kp) x = nd(rng);
  // Values are the first dv entries of each key row, as in MLA's latent cache.
  PagedKv kv = PagedKv::f32(kp.data(), kp.data(), size_t(64) * dk, size_t(dk), 64, table.data());
  std::vector<float> q(size_t(nq) * dk);
  for (auto& x : q) x = nd(rng);
  std::vector<float> parts(size_t(2) * nq * dv), lses(size_t(2) * nq), scores(size_t(nq) * kAttnPartition);
  attention_partition(q.data(), nq, dk, dv, 0.25f, kv, 0, 100, parts.data(), lses.data(), scores.data());
  attention_partition(q.data(), nq, dk, dv, 0.25f, kv, 100, n, parts.data() + nq * dv, lses.data() + nq, scores.data());
  std::vector<float> out(size_t(nq) * dv), ref(size_t(nq) * dv);
  merge_partitions(parts.data(), lses.data(), 2, nq, dv, out.data(), nullptr);
  attention_reference(q.data(), nq, dk, dv, 0.25f, kv, n, ref.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(Attention, PrefillTilesMatchPerQueryReference) {
  // A chunk of T queries continuing a sequence that already holds `start` tokens.
  for (auto [start, T, nq] : {std::tuple{0, 1, 3}, {0, 70, 3}, {37, 100, 12}, {130, 5, 2}, {0, 129, 1}}) {
    const int dk = 40, dv = 24, bs = 64, row = 72;
    const int n_ctx = start + T, blocks = (n_ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = blocks - 1 - b;
    std::mt19937 rng(start * 100 + T);
    std::normal_distribution<float> nd;
    std::vector<float> pool(size_t(blocks) * bs * row);
    for (auto& x : pool) x = nd(rng);
    PagedKv kv = PagedKv::f32(pool.data(), pool.data() + dk, size_t(bs) * row, size_t(row), bs, table.data());
    const size_t q_stride = size_t(nq) * dk + 5, o_stride = size_t(nq) * dv + 3;
    std::vector<float> q(size_t(T) * q_stride);
    for (auto& x : q) x = nd(rng);
    std::vector<float> out(size_t(T) * o_stride), ref(size_t(nq) * dv);
    std::vector<float> scratch(attention_prefill_scratch_floats(nq, dk, dv));
    // Two calls splitting the chunk, as threads do.
    const int mid = T / 2;
    attention_prefill(q.data(), q_stride, 0, mid, start, nq, dk, dv, 0.2f, kv, out.data(), o_stride, scratch.data());
    attention_prefill(q.data(), q_stride, mid, T, start, nq, dk, dv, 0.2f, kv, out.data(), o_stride, scratch.data());
    for (int t = 0; t < T; ++t) {
      attention_reference(q.data() + size_t(t) * q_stride, nq, dk, dv, 0.2f, kv, start + t + 1, ref.data());
      for (int i = 0; i < nq * dv; ++i)
        ASSERT_NEAR(out[size_t(t) * o_stride + size_t(i)], ref[size_t(i)], 2e-5f) << "start=" << start << " T=" << T << " t=" << t;
    }
  }
}

TEST(Attention, PrefillQueryIsBitIdenticalWhateverItsTile) {
  // The prefix cache's exactness rests on this: a query's output depends only on it and the
  // keys before it, not on which queries share its tile or call (a chunk boundary elsewhere).
  for (auto [start, T, nq] : {std::tuple{0, 70, 3}, {37, 100, 12}, {64, 20, 5}, {0, 17, 1}}) {
    const int dk = 40, dv = 24, bs = 64, row = 72;
    const int n_ctx = start + T, blocks = (n_ctx + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = b;
    std::mt19937 rng(start + 7 * T);
    std::normal_distribution<float> nd;
    std::vector<float> pool(size_t(blocks) * bs * row);
    for (auto& x : pool) x = nd(rng);
    PagedKv kv = PagedKv::f32(pool.data(), pool.data() + dk, size_t(bs) * row, size_t(row), bs, table.data());
    const size_t q_stride = size_t(nq) * dk, o_stride = size_t(nq) * dv;
    std::vector<float> q(size_t(T) * q_stride);
    for (auto& x : q) x = nd(rng);
    std::vector<float> all(size_t(T) * o_stride), one(size_t(T) * o_stride);
    std::vector<float> scratch(attention_prefill_scratch_floats(nq, dk, dv));
    attention_prefill(q.data(), q_stride, 0, T, start, nq, dk, dv, 0.2f, kv, all.data(), o_stride, scratch.data());
    for (int t = 0; t < T; ++t)
      attention_prefill(q.data(), q_stride, t, t + 1, start, nq, dk, dv, 0.2f, kv, one.data(), o_stride, scratch.data());
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(all[i], one[i]) << "start=" << start << " T=" << T << " nq=" << nq << " token " << i / o_stride;
  }
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// The decode shapes the presets and bundled models run (src/convert/presets.cpp, models/*/config.json).
// MLA attends every head to the shared latent row [c | k_pe] with c as the value, so dk is
// kv_lora_rank + qk_rope_head_dim and dv is kv_lora_rank, values aliasing the keys; GQA has
// separate key and value rows of head_dim. The MLA mixer hands the kernel all 12 heads of
// bench-100m or, when decode rows are too few to fill the threads, groups of ceil(12 / threads)
// (6, 4, 3, 2, 1); other head counts come with other configs (any nq per KV group is allowed).
// 5, 6 and 7 heads take the AVX-512 value loop's 5- and 6-head tiles and its 6 + 1 split; 3 and 7
// the score tile's 3-head tail after 4-head tiles.
struct DecodeShape {
  const char* what;
  int nq, dk, dv;
  bool latent;  // values are the first dv floats of the key row (MLA)
};

constexpr DecodeShape kDecodeShapes[] = {
    {"bench-100m MLA (latent 256 + rope 32)", 12, 288, 256, true},
    {"bench-100m MLA, 7-head group", 7, 288, 256, true},
    {"bench-100m MLA, 6-head group", 6, 288, 256, true},
    {"bench-100m MLA, 5-head group", 5, 288, 256, true},
    {"bench-100m MLA, 3-head group", 3, 288, 256, true},
    {"bench-100m MLA, 1-head group", 1, 288, 256, true},
    {"deltacoder MLA (latent 96 + rope 16)", 3, 112, 96, true},
    {"tiny-hybrid MLA (latent 32 + rope 8)", 2, 40, 32, true},
    {"bench-100m-dense GQA (12 q / 4 kv heads of 64)", 3, 64, 64, false},
    {"tiny-llama GQA (4 q / 2 kv heads of 16)", 2, 16, 16, false},
    {"GQA 5 q heads per kv head", 5, 64, 64, false},
    {"GQA 7 q heads per kv head", 7, 64, 64, false},
};

// A paged pool in the layout the mixers write, in any KV dtype: MLA rows of dk values (the value
// is the row's head); GQA rows holding two kv heads' keys then their values, this head being the
// second; fp8 rows' scales after the codes (one per latent row, one per head's key or value).
struct DecodeCase {
  std::vector<int32_t> table;
  std::vector<std::byte> pool;
  std::vector<float> q;
  PagedKv kv;

  DecodeCase(const DecodeShape& s, int n_ctx, int bs, unsigned seed, KvDtype dt = KvDtype::F32) {
    const int blocks = (n_ctx + bs - 1) / bs;
    for (int b = 0; b < blocks; ++b) table.push_back(2 * (blocks - 1 - b) + 1);  // reversed, with gaps
    const int segs = s.latent ? 1 : 4;  // rows of dk values per token
    const size_t es = kv_elem_bytes(dt), codes = size_t(segs) * size_t(s.dk) * es;
    const size_t scales_at = (codes + 3) / 4 * 4;
    const size_t row = kv_has_scales(dt) ? scales_at + size_t(segs) * 4 : codes;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const size_t tokens = size_t(2 * blocks) * size_t(bs);
    pool.resize(tokens * row);
    std::vector<float> vals(size_t(s.dk));
    for (size_t t = 0; t < tokens; ++t)
      for (int g = 0; g < segs; ++g) {
        const float spread = 1.f + 0.25f * float(g + int(t % 7));  // rows of other magnitudes: other scales
        for (auto& x : vals) x = nd(rng) * spread;
        std::byte* r = pool.data() + t * row;
        kv_store_row(dt, vals.data(), s.dk, r + size_t(g) * size_t(s.dk) * es,
                     kv_has_scales(dt) ? reinterpret_cast<float*>(r + scales_at) + g : nullptr);
      }
    q.resize(size_t(s.nq) * size_t(s.dk));
    for (auto& x : q) x = nd(rng);
    const int kseg = s.latent ? 0 : 1, vseg = s.latent ? 0 : 3;
    kv.k = pool.data() + size_t(kseg) * size_t(s.dk) * es;
    kv.v = pool.data() + size_t(vseg) * size_t(s.dk) * es;
    if (kv_has_scales(dt)) {
      kv.k_scale = pool.data() + scales_at + size_t(kseg) * 4;
      kv.v_scale = pool.data() + scales_at + size_t(vseg) * 4;
    }
    kv.block_stride = size_t(bs) * row;
    kv.token_stride = row;
    kv.block_size = bs;
    kv.block_table = table.data();
    kv.dtype = dt;
  }
};

TEST(Attention, DecodeMatchesReferenceAtModelShapes) {
  // Context lengths: below one 4-key score tile, a 4-key remainder, a 32-row value-block
  // remainder, exactly one partition, one past it, and several partitions with a ragged end.
  // For every KV dtype: the reference reads the same stored rows, so the bound is the f32 one.
  for (KvDtype dt : {KvDtype::F32, KvDtype::BF16, KvDtype::Fp8E4M3})
  for (const DecodeShape& s : kDecodeShapes) {
    const float scale = 1.f / std::sqrt(float(s.dk));
    for (int n_ctx : {1, 3, 38, 256, 257, 777}) {
      for (int bs : {64, 16}) {
        if (bs == 16 && n_ctx != 257) continue;  // small blocks: one length is enough
        DecodeCase c(s, n_ctx, bs, unsigned(n_ctx * 31 + s.nq * 7 + s.dk), dt);
        std::vector<float> out(size_t(s.nq) * size_t(s.dv), NAN), ref(out.size());
        std::vector<float> scratch(attention_scratch_floats(s.nq, s.dv, n_ctx));
        attention_decode(c.q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, out.data(), scratch.data());
        attention_reference(c.q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, ref.data());
        for (int h = 0; h < s.nq; ++h)
          for (int d = 0; d < s.dv; ++d) {
            const size_t i = size_t(h) * size_t(s.dv) + size_t(d);
            ASSERT_NEAR(out[i], ref[i], 4e-5f * (1.f + std::fabs(ref[i]))) << kv_dtype_name(dt) << " " << s.what << ": n_ctx=" << n_ctx << " block=" << bs << " head " << h
                                               << " of " << s.nq << ", value column " << d << " of " << s.dv;
          }
      }
    }
  }
}

TEST(Attention, Bf16ProductsStayWithinTheirRoundingOfTheReference) {
  // bf16 caches with bf16 products (--activation-dtype bf16): the query and the probabilities
  // are rounded to bf16 (relative error <= 2^-9 each), so a score moves by about 2^-9 of
  // |q| |k| scale and the output by about 2^-9 of the values it averages. The bound is the f32
  // one's scaled to that (these rows' scores spread up to 2.75x wider than N(0,1) ones, so the
  // softmax is peaked and sensitive); the measured worst case and rms are printed (2.2e-2 and
  // 1.3e-3 when written). On AVX-512 the products must
  // also differ from f32 products (the option took effect); elsewhere they must not.
  const bool avx512 = active_isa() == Isa::Avx512;
  double worst = 0, sq = 0;
  size_t count = 0;
  for (const DecodeShape& s : kDecodeShapes) {
    const float scale = 1.f / std::sqrt(float(s.dk));
    for (int n_ctx : {1, 3, 38, 256, 257, 777}) {
      DecodeCase c(s, n_ctx, 64, unsigned(n_ctx * 31 + s.nq * 7 + s.dk), KvDtype::BF16);
      std::vector<float> f32(size_t(s.nq) * size_t(s.dv)), dot(f32.size()), ref(f32.size());
      std::vector<float> scratch(attention_scratch_floats(s.nq, s.dv, n_ctx));
      attention_decode(c.q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, f32.data(), scratch.data());
      c.kv.bf16_products = true;
      attention_decode(c.q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, dot.data(), scratch.data());
      attention_reference(c.q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, ref.data());
      for (size_t i = 0; i < ref.size(); ++i) {
        const double e = std::fabs(double(dot[i]) - ref[i]) / (1.0 + std::fabs(ref[i]));
        worst = std::max(worst, e);
        sq += e * e;
        ++count;
        ASSERT_LT(e, 4e-2) << s.what << ": n_ctx=" << n_ctx << " value " << i;
      }
      const bool same = std::memcmp(f32.data(), dot.data(), f32.size() * sizeof(float)) == 0;
      if (avx512 && n_ctx > 1) {
        EXPECT_FALSE(same) << s.what << ": n_ctx=" << n_ctx;
      } else if (!avx512) {
        EXPECT_TRUE(same) << s.what;
      }
    }
  }
  std::printf("bf16 products: |out - reference| / (1 + |reference|): worst %.2e, rms %.2e\n", worst,
              std::sqrt(sq / double(std::max<size_t>(count, 1))));
  EXPECT_LT(std::sqrt(sq / double(std::max<size_t>(count, 1))), 5e-3);
}

TEST(Attention, DecodeRowsAreBitIdenticalToDecodingEachRow) {
  // A speculative chunk's rows scored together must give every row exactly what decoding it alone
  // gives (greedy speculation is held bit-identical to plain decoding). Chunks inside one
  // partition, crossing a partition boundary (250 + 8), starting on one (256), past two; with
  // scratch for all rows, and for two at a time (rows split into groups).
  struct Chunk { int n_ctx0, T; };
  const Chunk chunks[] = {{1, 1}, {1, 8}, {5, 4}, {250, 8}, {256, 3}, {600, 5}};
  // bf16 caches also with bf16 products (PagedKv::bf16_products).
  for (KvDtype dt : {KvDtype::F32, KvDtype::BF16, KvDtype::Fp8E4M3})
  for (bool dot : {false, true})
  for (const DecodeShape& s : {kDecodeShapes[0], kDecodeShapes[6], kDecodeShapes[7], kDecodeShapes[8], kDecodeShapes[9], kDecodeShapes[11]})
  for (const Chunk& ch : chunks)
  for (bool tight : {false, true}) {
    if (dot && dt != KvDtype::BF16) continue;
    const int n_last = ch.n_ctx0 + ch.T - 1;
    DecodeCase c(s, n_last, 64, unsigned(ch.n_ctx0 * 13 + ch.T + s.dk), dt);
    c.kv.bf16_products = dot;
    const size_t q_stride = size_t(s.nq) * size_t(s.dk) + 5, o_stride = size_t(s.nq) * size_t(s.dv) + 3;
    std::vector<float> q(size_t(ch.T) * q_stride);
    std::mt19937 rng(unsigned(ch.T * 7 + s.nq));
    std::normal_distribution<float> nd;
    for (auto& x : q) x = nd(rng);
    const float scale = 1.f / std::sqrt(float(s.dk));
    const size_t one = attention_scratch_floats(s.nq, s.dv, n_last);
    const size_t room = std::max(one, attention_rows_scratch_floats(tight ? 2 : ch.T, s.nq, s.dk, s.dv, n_last));
    std::vector<float> scratch(room), rows(size_t(ch.T) * o_stride, 0.f), alone(rows.size(), 0.f);
    attention_decode_rows(q.data(), q_stride, ch.T, s.nq, s.dk, s.dv, scale, c.kv, ch.n_ctx0, rows.data(), o_stride,
                          scratch.data(), scratch.size());
    for (int j = 0; j < ch.T; ++j)
      attention_decode(q.data() + size_t(j) * q_stride, s.nq, s.dk, s.dv, scale, c.kv, ch.n_ctx0 + j,
                       alone.data() + size_t(j) * o_stride, scratch.data());
    for (int j = 0; j < ch.T; ++j)
      ASSERT_EQ(0, std::memcmp(rows.data() + size_t(j) * o_stride, alone.data() + size_t(j) * o_stride,
                               size_t(s.nq) * size_t(s.dv) * sizeof(float)))
          << kv_dtype_name(dt) << (dot ? " (bf16 products) " : " ") << s.what << ": row " << j << " of " << ch.T << " from context " << ch.n_ctx0
          << (tight ? ", two rows at a time" : "");
  }
}

TEST(Attention, FetchingTheNextItemChangesNoResult) {
  // Decode fetches the next partition, and after its last the next item's first (KvAhead): a
  // request for memory only. Results with and without a next item, shorter or longer than this
  // one (its share per key scored then above or below one row), must be the same bits.
  for (KvDtype dt : {KvDtype::F32, KvDtype::BF16, KvDtype::Fp8E4M3})
  for (bool dot : {false, true})
  for (const DecodeShape& s : {kDecodeShapes[0], kDecodeShapes[6], kDecodeShapes[8]})
  for (auto [n_ctx, next_ctx] : {std::pair{1, 300}, {100, 600}, {600, 7}, {257, 256}}) {
    if (dot && dt != KvDtype::BF16) continue;
    DecodeCase c(s, n_ctx + 4, 64, unsigned(n_ctx + s.dk), dt), next(s, next_ctx, 64, unsigned(next_ctx), dt);
    c.kv.bf16_products = next.kv.bf16_products = dot;
    const size_t q_stride = size_t(s.nq) * size_t(s.dk), o_stride = size_t(s.nq) * size_t(s.dv);
    std::vector<float> q(5 * q_stride);
    std::mt19937 rng{unsigned(n_ctx)};
    std::normal_distribution<float> nd;
    for (auto& x : q) x = nd(rng);
    const float scale = 1.f / std::sqrt(float(s.dk));
    std::vector<float> scratch(std::max(attention_scratch_floats(s.nq, s.dv, n_ctx + 4),
                                        attention_rows_scratch_floats(5, s.nq, s.dk, s.dv, n_ctx + 4)));
    std::vector<float> plain(5 * o_stride), fetching(5 * o_stride);
    attention_decode(q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, plain.data(), scratch.data());
    attention_decode(q.data(), s.nq, s.dk, s.dv, scale, c.kv, n_ctx, fetching.data(), scratch.data(), &next.kv, next_ctx);
    ASSERT_EQ(0, std::memcmp(plain.data(), fetching.data(), o_stride * sizeof(float)))
        << kv_dtype_name(dt) << " " << s.what << ": decode, context " << n_ctx << ", next " << next_ctx;
    attention_decode_rows(q.data(), q_stride, 5, s.nq, s.dk, s.dv, scale, c.kv, n_ctx, plain.data(), o_stride,
                          scratch.data(), scratch.size());
    attention_decode_rows(q.data(), q_stride, 5, s.nq, s.dk, s.dv, scale, c.kv, n_ctx, fetching.data(), o_stride,
                          scratch.data(), scratch.size(), &next.kv, next_ctx);
    ASSERT_EQ(0, std::memcmp(plain.data(), fetching.data(), plain.size() * sizeof(float)))
        << kv_dtype_name(dt) << " " << s.what << ": 5 rows, context " << n_ctx << ", next " << next_ctx;
  }
}

TEST(Attention, PrefillMatchesReferenceAtWideLatentShapes) {
  // The prefill tile's value loop runs 64 columns at a time: 256 is four full chunks, 96 one full
  // and one partial. A chunk that continues a context crossing a 64-key block.
  for (KvDtype dt : {KvDtype::F32, KvDtype::BF16, KvDtype::Fp8E4M3})
  for (const DecodeShape& s : {kDecodeShapes[0], kDecodeShapes[6], kDecodeShapes[8]}) {
    const int start = 70, T = 9, n_ctx = start + T;
    DecodeCase c(s, n_ctx, 64, 11, dt);
    const size_t q_stride = size_t(s.nq) * size_t(s.dk), o_stride = size_t(s.nq) * size_t(s.dv);
    std::vector<float> q(size_t(T) * q_stride);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (auto& x : q) x = nd(rng);
    const float scale = 1.f / std::sqrt(float(s.dk));
    std::vector<float> out(size_t(T) * o_stride, NAN), ref(o_stride);
    std::vector<float> scratch(attention_prefill_scratch_floats(s.nq, s.dk, s.dv));
    attention_prefill(q.data(), q_stride, 0, T, start, s.nq, s.dk, s.dv, scale, c.kv, out.data(), o_stride, scratch.data());
    for (int t = 0; t < T; ++t) {
      attention_reference(q.data() + size_t(t) * q_stride, s.nq, s.dk, s.dv, scale, c.kv, start + t + 1, ref.data());
      for (size_t i = 0; i < o_stride; ++i)
        ASSERT_NEAR(out[size_t(t) * o_stride + i], ref[i], 4e-5f * (1.f + std::fabs(ref[i])))
            << kv_dtype_name(dt) << " " << s.what << ": t=" << t << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace ds
