// Model::save_block / load_block, which the disk tier is built on: a block copied out and into
// another block id must carry every attention layer's rows for it, so a sequence whose block
// table points at the copies decodes bit-identically to one that points at the originals, and
// loading one block must not touch its neighbours.
#include <gtest/gtest.h>

#include <cstring>

#include "model_util.h"

namespace ds::test {
namespace {

void round_trip(const std::string& dir) {
  // Slot 0 and slot 1 get the same prompt; slot 1's table is then pointed at copies.
  Runner r(dir, /*max_seqs=*/2, /*max_tokens=*/256, /*threads=*/1, /*blocks_per_seq=*/4);
  const size_t bytes = r.model->kv_bytes_per_block(64);
  ASSERT_GT(bytes, 0u) << dir << " has no attention layer";
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(int32_t((i * 37 + 11) % r.vocab));
  r.run(0, prompt, 0, false);

  // Copy slot 0's three used blocks into slot 1's first three block ids, through buffers.
  std::vector<std::byte> buf(bytes);
  for (int b = 0; b < 3; ++b) {
    r.model->save_block(r.tables[0][size_t(b)], buf.data());
    r.model->load_block(r.tables[1][size_t(b)], buf.data());
    std::vector<std::byte> again(bytes);
    r.model->save_block(r.tables[1][size_t(b)], again.data());
    EXPECT_EQ(std::memcmp(buf.data(), again.data(), bytes), 0) << "block " << b << " did not round-trip";
  }
  // The unused fourth block of slot 1 was not written by any load.
  std::vector<std::byte> untouched(bytes), after(bytes);
  r.model->save_block(r.tables[1][3], untouched.data());

  // The recurrent state travels separately (save_state / load_state).
  std::vector<std::byte> st(r.model->state_bytes_per_slot());
  r.model->save_state(0, st.data());
  r.model->load_state(1, st.data());

  // Decode the same tokens on both: the copies must give the originals' logits exactly.
  std::vector<int32_t> next = {int32_t(7 % r.vocab)};
  for (int step = 0; step < 8; ++step) {
    const auto a = r.run(0, next, int(prompt.size()) + step, false);
    const auto b = r.run(1, next, int(prompt.size()) + step, false);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "decode step " << step;
    next = {argmax(a.data(), r.vocab)};
  }
  // Decode wrote positions 150..157 into slot 1's block 2 (positions 128..191), not block 3.
  r.model->save_block(r.tables[1][3], after.data());
  EXPECT_EQ(std::memcmp(untouched.data(), after.data(), bytes), 0);
}

TEST(BlockIO, HybridBlocksRoundTripAndDecodeIdentically) {
  round_trip(std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32");
}

TEST(BlockIO, LlamaBlocksRoundTripAndDecodeIdentically) {
  round_trip(std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-llama-f32");
}

TEST(BlockIO, ABlockOutsideThePoolIsRefused) {
  Runner r(std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32", 1, 64, 1, 2);
  std::vector<std::byte> buf(r.model->kv_bytes_per_block(64));
  EXPECT_THROW(r.model->save_block(2, buf.data()), std::exception);
  EXPECT_THROW(r.model->load_block(-1, buf.data()), std::exception);
}

}  // namespace
}  // namespace ds::test
