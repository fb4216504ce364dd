// Scheduler policy in isolation: decode rows first, chunked prefill within the token budget,
// at most max_num_seqs running, FCFS admission that waits for blocks, preemption of the newest.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

// The scheduler over a pool with the prefix cache off: nothing is ever cached or saved, so the
// memory behind the blocks is never reached.
struct NoMemory : CacheMemory {
  size_t kv_bytes_per_block(int) const override { return 0; }
  size_t state_bytes_per_slot() const override { return 0; }
  void save_state(int, void*) const override {}
  void load_state(int, const void*) override {}
  void save_block(int, void*) const override {}
  void load_block(int, const void*) override {}
};
struct PlainCache {
  NoMemory memory;
  PrefixCache cache;
  PlainCache(int blocks, int block_size) : cache(config(blocks, block_size), memory) {}
  static PrefixCacheConfig config(int blocks, int block_size) {
    PrefixCacheConfig c;
    c.num_blocks = blocks;
    c.block_size = block_size;
    return c;
  }
  BlockPool& pool() { return cache.pool(); }
};

std::unique_ptr<Sequence> seq_with_prompt(int len) {
  auto s = std::make_unique<Sequence>();
  s->tokens.assign(size_t(len), 1);
  s->num_prompt = len;
  s->req.max_tokens = 1000;
  s->stream = std::make_shared<RequestStream>(0, len);
  return s;
}

// Pretends the model ran: commits and appends one sampled token per logits chunk.
void run_step(Scheduler& sch) {
  const StepPlan& p = sch.schedule();
  sch.commit_step();
  for (size_t i = 0; i < p.chunks.size(); ++i)
    if (p.chunks[i].num_logits) p.seqs[i]->tokens.push_back(2);
}

TEST(Scheduler, ChunkedPrefillWithinBudgetThenDecodeFirst) {
  PlainCache cache(100, 64);
  BlockPool& pool = cache.pool();
  Scheduler sch({4, 100, 1024}, cache.cache);
  auto a = seq_with_prompt(150);
  Sequence* pa = a.get();
  sch.add(std::move(a));
  const StepPlan& p1 = sch.schedule();
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].num_tokens, 64);  // the budget's 100, cut back to a block boundary
  EXPECT_EQ(p1.chunks[0].num_logits, 0);
  EXPECT_EQ(pool.num_used(), 3);  // whole prompt reserved at admission
  sch.commit_step();
  auto b = seq_with_prompt(80);
  Sequence* pb = b.get();
  sch.add(std::move(b));
  const StepPlan& p2 = sch.schedule();
  ASSERT_EQ(p2.chunks.size(), 2u);
  EXPECT_EQ(p2.seqs[0], pa);
  EXPECT_EQ(p2.chunks[0].start_pos, 64);
  EXPECT_EQ(p2.chunks[0].num_tokens, 86);  // the rest of the prompt: no boundary needed
  EXPECT_EQ(p2.chunks[0].num_logits, 1);
  EXPECT_EQ(p2.seqs[1], pb);
  EXPECT_EQ(p2.chunks[1].num_tokens, 14);  // what is left of the budget, under one block
  EXPECT_EQ(p2.chunks[1].num_logits, 0);
  sch.commit_step();
  pa->tokens.push_back(5);
  const StepPlan& p3 = sch.schedule();
  ASSERT_EQ(p3.chunks.size(), 2u);
  EXPECT_EQ(p3.num_decode, 1);
  EXPECT_EQ(p3.seqs[0], pa);  // decode row first
  EXPECT_EQ(p3.chunks[0].num_tokens, 1);
  EXPECT_EQ(p3.chunks[0].start_pos, 150);
  EXPECT_EQ(p3.seqs[1], pb);
  EXPECT_EQ(p3.chunks[1].num_tokens, 66);
  EXPECT_EQ(p3.chunks[1].token_offset, 1);
  EXPECT_EQ(p3.tokens.size(), 67u);
}

TEST(Scheduler, AtMostMaxNumSeqsRunning) {
  PlainCache cache(100, 64);
  Scheduler sch({2, 1000, 1024}, cache.cache);
  for (int i = 0; i < 5; ++i) sch.add(seq_with_prompt(10));
  const StepPlan& p = sch.schedule();
  EXPECT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(sch.num_running(), 2);
  EXPECT_EQ(sch.num_waiting(), 3);
}

TEST(Scheduler, FcfsHeadWaitsForBlocksAndIsNotSkipped) {
  PlainCache cache(4, 64);
  BlockPool& pool = cache.pool();
  Scheduler sch({8, 4096, 256}, cache.cache);
  sch.add(seq_with_prompt(130));  // 3 blocks
  sch.add(seq_with_prompt(100));  // 2 blocks: does not fit beside the first
  sch.add(seq_with_prompt(10));   // 1 block: would fit, but must not overtake
  const StepPlan& p = sch.schedule();
  EXPECT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(sch.num_waiting(), 2);
  EXPECT_EQ(pool.num_free(), 1);
}

TEST(Scheduler, PreemptsNewestWhenDecodeCannotGrowAndRecomputesIt) {
  PlainCache cache(2, 64);
  BlockPool& pool = cache.pool();
  Scheduler sch({4, 4096, 128}, cache.cache);
  auto a = seq_with_prompt(64);
  auto b = seq_with_prompt(64);
  Sequence* pa = a.get();
  Sequence* pb = b.get();
  sch.add(std::move(a));
  sch.add(std::move(b));
  run_step(sch);  // both prefilled, one block each, each sampled a token
  EXPECT_EQ(pool.num_free(), 0);
  // Both now need a second block for position 64: a gets it by preempting b (the newest).
  const StepPlan& p = sch.schedule();
  EXPECT_EQ(p.num_preempted, 1);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.seqs[0], pa);
  EXPECT_EQ(pa->blocks.size(), 2u);
  EXPECT_EQ(sch.num_waiting(), 1);
  EXPECT_EQ(pb->num_computed, 0);
  EXPECT_EQ(pb->tokens.size(), 65u);  // its generated token is kept for the recompute
  EXPECT_EQ(pb->slot, -1);
  EXPECT_EQ(sch.num_preemptions(), 1u);
  sch.commit_step();
  pa->tokens.push_back(3);
  sch.finish(pa);
  // With a gone, b comes back and prefills prompt + generated in one chunk.
  const StepPlan& p2 = sch.schedule();
  ASSERT_EQ(p2.chunks.size(), 1u);
  EXPECT_EQ(p2.seqs[0], pb);
  EXPECT_EQ(p2.chunks[0].start_pos, 0);
  EXPECT_EQ(p2.chunks[0].num_tokens, 65);
  EXPECT_EQ(p2.chunks[0].num_logits, 1);
}

TEST(Scheduler, CancelledSequencesFreeBlocksAndSlots) {
  PlainCache cache(10, 64);
  BlockPool& pool = cache.pool();
  Scheduler sch({2, 4096, 256}, cache.cache);
  auto a = seq_with_prompt(100);
  auto b = seq_with_prompt(100);
  auto c = seq_with_prompt(100);
  a->stream->cancel();
  c->stream->cancel();
  sch.add(std::move(a));
  sch.add(std::move(b));
  sch.add(std::move(c));
  run_step(sch);
  EXPECT_EQ(pool.num_used(), 4);
  std::vector<std::unique_ptr<Sequence>> out;
  sch.take_cancelled(&out);
  EXPECT_EQ(out.size(), 2u);
  EXPECT_EQ(pool.num_used(), 2);
  EXPECT_EQ(sch.num_running(), 1);
  EXPECT_EQ(sch.num_waiting(), 0);
}

// --spec-window: at most that many sequences get a verify chunk in one step, oldest first; the
// rest decode one token, and every decoding sequence still advances.
TEST(Scheduler, SpecWindowBoundsVerifyingSequences) {
  PlainCache cache(100, 64);
  SchedulerLimits lim{4, 1000, 1024};
  lim.spec_tokens = 3;
  lim.spec_window = 2;
  Scheduler sch(lim, cache.cache);
  std::vector<Sequence*> seqs;
  for (int i = 0; i < 4; ++i) {
    auto s = seq_with_prompt(10);
    seqs.push_back(s.get());
    sch.add(std::move(s));
  }
  run_step(sch);  // the prompts
  const StepPlan& p = sch.schedule();
  ASSERT_EQ(p.num_decode, 4);
  ASSERT_EQ(p.chunks.size(), 4u);
  int verifying = 0;
  for (size_t i = 0; i < p.chunks.size(); ++i) {
    EXPECT_EQ(p.seqs[i], seqs[i]);
    const int rows = p.chunks[i].num_tokens;
    EXPECT_EQ(rows, i < 2 ? 4 : 1) << "sequence " << i;
    verifying += rows > 1 ? 1 : 0;
  }
  EXPECT_EQ(verifying, 2);
  EXPECT_EQ(p.tokens.size(), 2u * 4u + 2u);  // the window's verify rows, then plain decode rows
}

}  // namespace
}  // namespace ds
