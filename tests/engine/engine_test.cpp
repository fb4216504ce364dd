// The engine against the FakeModel: exact outputs under batching, chunking and preemption,
// cancellation returning every block, finish reasons, and refusals.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <future>
#include <sstream>
#include <thread>

#include "engine_test_util.h"

namespace ds {
namespace {

using testing::collect;
using testing::FakeModel;
using testing::greedy_request;
using testing::make_prompt;

using Fixture = testing::FakeEngine;

EngineConfig small_config() {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 96;
  c.max_model_len = 512;
  c.num_kv_blocks = 64;
  return c;
}

TEST(Engine, GreedyMatchesReferenceAcrossChunkedPrefill) {
  Fixture f(small_config());
  auto prompt = make_prompt(300, 1);  // four chunks of <= 96 tokens
  auto s = f.engine->submit(greedy_request(prompt, 40));
  auto c = collect(*s);
  EXPECT_EQ(c.reason, FinishReason::Length);
  EXPECT_EQ(c.tokens, f.model->reference_generate(prompt, 40));
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(Engine, ConcurrentGreedyStreamsEqualEachAlone) {
  Fixture f(small_config());
  const int n = 16;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(make_prompt(20 + 37 * i % 200, 100 + i));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) streams.push_back(f.engine->submit(greedy_request(prompts[size_t(i)], 30 + i)));
  for (int i = 0; i < n; ++i) {
    auto c = collect(*streams[size_t(i)]);
    EXPECT_EQ(c.tokens, f.model->reference_generate(prompts[size_t(i)], 30 + i)) << "stream " << i;
  }
  EXPECT_GT(f.model->max_rows_seen.load(), 1);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(Engine, PreemptionUnderAFullPoolRecomputesWithoutChangingOutputs) {
  EngineConfig c = small_config();
  c.num_kv_blocks = 8;  // room for about two of the sequences below at full length
  c.max_model_len = 256;
  Fixture f(c);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(make_prompt(60 + i, 200 + i));
    streams.push_back(f.engine->submit(greedy_request(prompts.back(), 150)));
  }
  for (int i = 0; i < 8; ++i) {
    auto r = collect(*streams[size_t(i)]);
    EXPECT_EQ(r.reason, FinishReason::Length);
    EXPECT_EQ(r.tokens, f.model->reference_generate(prompts[size_t(i)], 150)) << "stream " << i;
  }
  EXPECT_GT(f.engine->snapshot().preemptions, 0u);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  EXPECT_EQ(f.engine->snapshot().kv_blocks_used, 0);
}

TEST(Engine, SeededSamplingIsIndependentOfBatchComposition) {
  EngineConfig c = small_config();
  auto sampled = [](Engine& e, const std::vector<int32_t>& prompt, uint64_t seed) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = 25;
    r.ignore_eos = true;
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = seed;
    return e.submit(r);
  };
  auto prompt = make_prompt(50, 9);
  Fixture alone(c);
  auto ref = collect(*sampled(*alone.engine, prompt, 1234)).tokens;
  Fixture busy(c);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 6; ++i) others.push_back(sampled(*busy.engine, make_prompt(30 + i, i), uint64_t(i)));
  auto mine = sampled(*busy.engine, prompt, 1234);
  EXPECT_EQ(collect(*mine).tokens, ref);
  for (auto& o : others) collect(*o);
  EXPECT_NE(collect(*sampled(*alone.engine, prompt, 99)).tokens, ref);
}

TEST(Engine, StopsAtEosUnlessIgnored) {
  // Find a prompt whose 5th greedy token is some id, then make that id the eos.
  FakeModel probe;
  auto prompt = make_prompt(10, 77);
  auto ref = probe.reference_generate(prompt, 12);
  const int32_t eos = ref[4];
  int first = 0;
  while (ref[size_t(first)] != eos) ++first;
  Fixture f(small_config(), 512, {eos});
  Request r = greedy_request(prompt, 12);
  r.ignore_eos = false;
  auto c = collect(*f.engine->submit(r));
  EXPECT_EQ(c.reason, FinishReason::Stop);
  EXPECT_EQ(c.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + first + 1));
  r.ignore_eos = true;
  auto c2 = collect(*f.engine->submit(r));
  EXPECT_EQ(c2.reason, FinishReason::Length);
  EXPECT_EQ(c2.tokens, ref);
  // A request-level stop token works the same way.
  Fixture g(small_config());
  Request r2 = greedy_request(prompt, 12);
  r2.ignore_eos = false;
  r2.stop_token_ids = {eos};
  EXPECT_EQ(collect(*g.engine->submit(r2)).reason, FinishReason::Stop);
}

TEST(Engine, LengthAtMaxModelLen) {
  EngineConfig c = small_config();
  c.max_model_len = 100;
  Fixture f(c);
  auto prompt = make_prompt(90, 5);
  auto r = collect(*f.engine->submit(greedy_request(prompt, 50)));
  EXPECT_EQ(r.reason, FinishReason::Length);
  EXPECT_EQ(r.tokens.size(), 10u);
}

TEST(Engine, CancelledStreamsReturnEveryBlock) {
  EngineConfig c = small_config();
  c.max_num_seqs = 16;
  c.num_kv_blocks = 128;
  Fixture f(c);
  f.model->step_delay_us = 200;
  std::vector<std::future<void>> clients;
  for (int i = 0; i < 200; ++i) {
    auto s = f.engine->submit(greedy_request(make_prompt(70 + i % 50, i), 400));
    clients.push_back(std::async(std::launch::async, [s, i] { collect(*s, 1 + i % 7); }));
  }
  for (auto& cl : clients) cl.get();
  // The engine frees cancelled sequences at its next step and retires the request right after;
  // give it a moment for all three counters (bounded: 5 s).
  auto settled = [&] {
    const auto snap = f.engine->snapshot();
    return snap.kv_blocks_used == 0 && snap.running == 0 && f.engine->in_flight() == 0;
  };
  for (int i = 0; i < 500 && !settled(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.engine->snapshot().kv_blocks_used, 0);
  EXPECT_EQ(f.engine->snapshot().running, 0);
  EXPECT_EQ(f.engine->in_flight(), 0);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(Engine, LogprobsReportModelDistribution) {
  Fixture f(small_config());
  std::vector<int32_t> history = make_prompt(10, 3);
  Request r = greedy_request(history, 3);
  r.logprobs = 2;
  auto c = collect(*f.engine->submit(r));
  ASSERT_EQ(c.outputs.size(), 3u);
  for (auto& o : c.outputs) {
    // Against a log-softmax of the model's logits computed here, in double.
    const auto want = f.model->reference_logprobs(history);
    EXPECT_EQ(o.token, want[0].first);
    EXPECT_NEAR(o.logprob, want[0].second, 1e-5);
    ASSERT_EQ(o.top.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(o.top[k].first, want[k].first) << "top " << k;
      EXPECT_NEAR(o.top[k].second, want[k].second, 1e-5) << "top " << k;
    }
    history.push_back(o.token);
  }
}

TEST(Engine, ForwardFailureFailsInFlightRequestsAndEngineKeepsServing) {
  Fixture f(small_config());
  f.model->fail_next = true;
  auto c = collect(*f.engine->submit(greedy_request(make_prompt(10, 1), 5)));
  EXPECT_EQ(c.reason, FinishReason::Error);
  EXPECT_NE(c.error.find("injected"), std::string::npos);
  EXPECT_TRUE(f.engine->alive());
  auto prompt = make_prompt(10, 2);
  auto ok = collect(*f.engine->submit(greedy_request(prompt, 5)));
  EXPECT_EQ(ok.tokens, f.model->reference_generate(prompt, 5));
  EXPECT_EQ(f.engine->snapshot().kv_blocks_used, 0);
}

TEST(Engine, RefusesInvalidRequests) {
  EngineConfig c = small_config();
  c.max_model_len = 64;
  Fixture f(c);
  EXPECT_THROW(f.engine->submit(greedy_request({}, 5)), Error);
  EXPECT_THROW(f.engine->submit(greedy_request({1, 512}, 5)), Error);
  EXPECT_THROW(f.engine->submit(greedy_request({1, -1}, 5)), Error);
  EXPECT_THROW(f.engine->submit(greedy_request(make_prompt(64, 1), 5)), Error);
  EXPECT_THROW(f.engine->submit(greedy_request({1}, 0)), Error);
}

TEST(Engine, QueueBoundAndShutdownRefusals) {
  EngineConfig c = small_config();
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 1;
  c.max_waiting = 2;
  Fixture f(c);
  f.model->step_delay_us = 2000;
  std::vector<std::shared_ptr<RequestStream>> ss;
  bool busy = false;
  for (int i = 0; i < 20 && !busy; ++i) {
    try {
      ss.push_back(f.engine->submit(greedy_request(make_prompt(50, i), 50)));
    } catch (const EngineBusy&) {
      busy = true;
    }
  }
  EXPECT_TRUE(busy);
  f.engine->cancel_all();
  for (auto& s : ss) EXPECT_EQ(collect(*s).reason, FinishReason::Cancelled);
  f.engine->close();
  EXPECT_THROW(f.engine->submit(greedy_request({1}, 1)), EngineStopped);
}

TEST(EngineConfig, RefusesInconsistentSettingsWithOneLine) {
  auto refuse = [](EngineConfig c, const std::string& needle) {
    try {
      Engine e(std::make_unique<FakeModel>(), c);
      ADD_FAILURE() << "accepted settings that should be refused: " << needle;
    } catch (const Error& err) {
      std::string msg = err.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 4;
  refuse(c, "--max-num-batched-tokens 4 is smaller than --max-num-seqs 8");
  c = small_config();
  c.max_num_seqs = 0;
  refuse(c, "--max-num-seqs");
  c = small_config();
  c.num_kv_blocks = 0;
  c.kv_pool_gb = 1e-6;  // 1073 bytes: not one block of 64 x 16 bytes... is one; model len needs 8
  refuse(c, "--kv-pool-gb");
  c = small_config();
  c.num_kv_blocks = 0;
  c.kv_pool_gb = -1;
  refuse(c, "--kv-pool-gb must be a positive number (or 0 for auto), got -1");
  c = small_config();
  c.max_model_len = 1;
  refuse(c, "--max-model-len must be in [2, 16777216]");
  c = small_config();
  c.profile_steps = -1;
  refuse(c, "--profile-steps -1 is negative");
}

// The log lines resolve_engine_config writes, caught from spdlog's default logger.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  CapturedLog() {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::ostream_sink_mt>(text)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
};

// Above max_position_embeddings, a model without positional encoding (KDA and NoPE MLA: the
// bundled models) serves with a warning; one with rotary positions is refused, with the reason
// and the allowed range. The same holds for a draft model.
TEST(EngineConfig, MaxModelLenPastPositionsWarnsWithoutPositionsAndRefusesRotary) {
  FakeModel nope;
  nope.mutable_config().mixer = {MixerKind::Kda, MixerKind::Mla};
  nope.mutable_config().max_position_embeddings = 4096;
  ASSERT_FALSE(nope.config().has_positional_encoding());
  EngineConfig c = small_config();
  c.num_kv_blocks = 0;
  c.kv_pool_gb = 0;
  c.max_model_len = 8192;
  {
    CapturedLog log;
    resolve_engine_config(&c, nope);
    const std::string w = log.text.str();
    EXPECT_NE(w.find("[warning] --max-model-len 8192 is above the model's max_position_embeddings 4096: its attention "
                     "has no positional encoding"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("untested"), std::string::npos) << w;
  }
  EXPECT_EQ(c.max_model_len, 8192);
  EXPECT_GE(int64_t(c.num_kv_blocks) * c.block_size, 8192);
  // At or under the limit: no warning; left at 0, the limit is the default.
  for (int len : {4096, 0}) {
    c = small_config();
    c.max_model_len = len;
    CapturedLog log;
    resolve_engine_config(&c, nope);
    EXPECT_EQ(log.text.str(), "") << len;
    EXPECT_EQ(c.max_model_len, 4096);
  }

  FakeModel rope;
  rope.mutable_config().mixer = {MixerKind::Gqa};
  rope.mutable_config().max_position_embeddings = 4096;
  ASSERT_TRUE(rope.config().has_positional_encoding());
  c = small_config();
  c.num_kv_blocks = 0;
  c.max_model_len = 4097;
  try {
    resolve_engine_config(&c, rope);
    ADD_FAILURE() << "a rotary model was allowed past max_position_embeddings";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "invalid settings: --max-model-len 4097 exceeds the model's max_position_embeddings 4096: its "
                 "attention uses rotary positions (RoPE), which hold only up to 4096 positions; allowed range [2, 4096]");
  }
  c = small_config();
  c.max_model_len = 4096;
  EXPECT_NO_THROW(resolve_engine_config(&c, rope));

  // A rotary draft under a NoPE target is refused the same way.
  c = small_config();
  c.num_kv_blocks = 0;
  c.max_model_len = 8192;
  try {
    CapturedLog log;
    resolve_engine_config(&c, nope, &rope);
    ADD_FAILURE() << "a rotary draft was allowed past its max_position_embeddings";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the draft model's max_position_embeddings 4096"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ds
