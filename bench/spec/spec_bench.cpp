// Speculative decoding benchmark (docs/speculative-decoding.md, "Measured"). Not a test: it
// prints figures and ratios. For one target + draft pair:
//   1. step costs from Model::forward alone, at B sequences (B = each concurrency):
//        t1  a B-row decode step of the target      td  the same of the draft
//        tv  B verify chunks of K+1 rows (the target's speculative step)
//      c = td / t1 (the draft's cost per proposed token), v = tv / t1 - 1 (the verify's extra);
//      ideal speedup AL / (1 + K c + v).
//   2. the engine at each concurrency, greedy, synthetic acceptance: steady-state decode tok/s
//      without speculation and with (K, AL) = (7, 3.84) and (3, 3.00) (the golden curve's), the
//      speedup, and measured / ideal.
//   3. lanes vs replay at K 3 and 7, concurrency 1: rollback bytes per sequence and tok/s.
// Run:
//   [DS_BENCH_ACTIVATION_DTYPE=f32|bf16] build/bench/spec/spec_bench TARGET_DIR DRAFT_DIR
//   [concurrencies=1,4,16,64] [new_tokens=256] [prompt=64] [threads=0]
// DS_BENCH_ACTIVATION_DTYPE: how activations meet bf16 weights, target and draft alike (serve
// --activation-dtype); every figure of a run uses it. DS_BENCH_PROFILE_STEPS=N: each engine run
// logs its step profile every N steps (engine/step_profile.h), to see where a round goes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"

namespace ds {
namespace {

using SteadyClock = std::chrono::steady_clock;

ActivationDtype bench_activation_dtype() {
  const char* e = std::getenv("DS_BENCH_ACTIVATION_DTYPE");
  return e ? parse_activation_dtype(e).value_or(ActivationDtype::F32) : ActivationDtype::F32;
}

double seconds_since(SteadyClock::time_point t) { return std::chrono::duration<double>(SteadyClock::now() - t).count(); }

struct StepRig {
  std::unique_ptr<Model> model;
  std::vector<std::vector<int32_t>> tables;
  int vocab = 0, prompt = 0;

  StepRig(const std::string& dir, int seqs, int prompt_len, int positions, int threads, const Model* share = nullptr) {
    model = share ? Model::load_sharing_threads(dir, *share) : Model::load(dir, threads);
    model->set_activation_dtype(bench_activation_dtype());
    vocab = model->config().vocab_size;
    prompt = prompt_len;
    const int blocks_per_seq = (prompt_len + positions) / 64 + 2;
    RuntimeLimits l;
    l.max_seqs = seqs;
    l.max_batch_tokens = std::max(seqs * positions, prompt_len * seqs);
    l.max_logit_rows = seqs * positions;
    l.num_kv_blocks = seqs * blocks_per_seq;
    l.block_size = 64;
    l.threads = threads;
    l.spec_positions = positions;
    model->allocate(l);
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> t;
      for (int b = 0; b < blocks_per_seq; ++b) t.push_back(s * blocks_per_seq + b);
      tables.push_back(t);
    }
    // Prefill every sequence once.
    std::vector<int32_t> toks;
    std::vector<SeqChunk> chunks;
    for (int s = 0; s < seqs; ++s) {
      SeqChunk c;
      c.slot = s;
      c.block_table = tables[size_t(s)].data();
      c.num_tokens = prompt_len;
      c.token_offset = int32_t(toks.size());
      c.num_logits = 0;
      for (int i = 0; i < prompt_len; ++i) toks.push_back(int32_t((i * 131 + s * 17 + 1) % vocab));
      chunks.push_back(c);
    }
    std::vector<float> logits(static_cast<size_t>(vocab));
    model->forward({toks, chunks}, logits.data());
  }

  // Median seconds of a step with `rows` tokens per sequence at the prompt's end (speculative
  // chunks when rows > 1; the committed state is untouched, so every repetition is the same).
  double step(int seqs, int rows, int reps = 40) {
    std::vector<int32_t> toks;
    std::vector<SeqChunk> chunks;
    for (int s = 0; s < seqs; ++s) {
      SeqChunk c;
      c.slot = s;
      c.block_table = tables[size_t(s)].data();
      c.start_pos = prompt;
      c.num_tokens = rows;
      c.token_offset = int32_t(toks.size());
      c.num_logits = rows;
      c.spec_lane = rows > 1 ? 0 : -1;
      for (int i = 0; i < rows; ++i) toks.push_back(int32_t((i * 7 + s + 3) % vocab));
      chunks.push_back(c);
    }
    std::vector<float> logits(size_t(seqs * rows) * size_t(vocab));
    std::vector<double> t;
    for (int r = 0; r < reps + 3; ++r) {
      const auto t0 = SteadyClock::now();
      model->forward({toks, chunks}, logits.data());
      if (r >= 3) t.push_back(seconds_since(t0));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

struct Run {
  double tok_s = 0;   // steady-state decode tokens per second, all streams together
  double al = 0;      // mean tokens per round (speculation only)
  size_t rollback_bytes = 0;
};

// Concurrency c, greedy, every stream `new_tokens` long: tokens arriving while all c streams
// decode (after the last first token, before the first stream ends), over that window.
Run engine_run(const std::string& target, const SpecOptions& spec, int c, int prompt, int new_tokens, int threads) {
  EngineConfig ec;
  ec.max_num_seqs = c;
  ec.max_num_batched_tokens = std::max(2048, c * 17);
  ec.max_model_len = prompt + new_tokens + 8;
  ec.threads = threads;
  ec.prefix.enabled = false;
  ec.activation_dtype = bench_activation_dtype();
  if (const char* p = std::getenv("DS_BENCH_PROFILE_STEPS")) ec.profile_steps = std::atoi(p);
  ec.spec = spec;
  Engine engine(Model::load(target, threads), ec);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < c; ++i) {
    Request r;
    for (int t = 0; t < prompt; ++t) r.prompt.push_back(int32_t((t * 131 + i * 17 + 1) % 8000));
    r.max_tokens = new_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    streams.push_back(engine.submit(std::move(r)));
  }
  // One reader polls every stream each 10 ms instead of a thread per stream woken per token:
  // on a small machine those wake-ups take cores from the model's threads, which would charge
  // plain decoding (a wake-up per token) more than speculation (one per round).
  std::vector<std::vector<SteadyClock::time_point>> times(static_cast<size_t>(c));
  std::vector<bool> done(static_cast<size_t>(c), false);
  for (int left = c; left > 0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto now = SteadyClock::now();
    for (int i = 0; i < c; ++i) {
      if (done[size_t(i)]) continue;
      StreamBatch b;
      streams[size_t(i)]->wait(std::chrono::milliseconds(0), &b);
      for (size_t k = 0; k < b.tokens.size(); ++k) times[size_t(i)].push_back(now);
      if (b.finished) {
        done[size_t(i)] = true;
        --left;
      }
    }
  }
  SteadyClock::time_point start{}, end = SteadyClock::time_point::max();
  for (const auto& t : times) {
    start = std::max(start, t.front());
    end = std::min(end, t.back());
  }
  size_t n = 0;
  for (const auto& t : times)
    for (const auto& x : t) n += (x > start && x <= end) ? 1 : 0;
  Run out;
  out.tok_s = end > start ? double(n) / std::chrono::duration<double>(end - start).count() : 0;
  int acc = 0, rounds = 0;
  for (const auto& s : streams) {
    acc += s->accepted_prediction_tokens();
    rounds += s->speculative_rounds();
  }
  out.al = rounds ? 1.0 + double(acc) / rounds : 0;
  return out;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoi(x));
  return v;
}

int main_impl(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: spec_bench TARGET_DIR DRAFT_DIR [concurrencies=1,4,16,64] [new_tokens=256] [prompt=64] [threads=0]\n");
    return 2;
  }
  const std::string target = argv[1], draft = argv[2];
  const std::vector<int> conc = parse_list(argc > 3 ? argv[3] : "1,4,16,64");
  const int new_tokens = argc > 4 ? std::atoi(argv[4]) : 256;
  const int prompt = argc > 5 ? std::atoi(argv[5]) : 64;
  const int threads = argc > 6 ? std::atoi(argv[6]) : 0;
  struct Point { int k; double al; };
  const Point points[] = {{7, 3.84}, {3, 3.00}};

  std::printf("target %s\ndraft  %s\nactivation dtype %s\n", target.c_str(), draft.c_str(),
              std::string(activation_dtype_name(bench_activation_dtype())).c_str());
  {
    auto t = Model::load(target, threads);
    auto d = Model::load(draft, threads);
    std::printf("decode weight bytes: target %zu, draft %zu (byte ratio %.4f)\n\n", t->decode_weight_bytes(),
                d->decode_weight_bytes(), double(d->decode_weight_bytes()) / double(t->decode_weight_bytes()));
  }
  std::printf("## step costs (Model::forward, median of 40)\n");
  std::printf("%4s %10s %10s %8s | %4s %10s %7s | %4s %10s %7s\n", "B", "t1 ms", "td ms", "c", "K", "tv ms", "v", "K", "tv ms", "v");
  struct Costs { double c, v7, v3; };
  std::vector<Costs> costs;
  for (int b : conc) {
    StepRig tr(target, b, prompt, 8, threads);
    StepRig dr(draft, b, prompt, 8, threads, tr.model.get());
    const double t1 = tr.step(b, 1), td = dr.step(b, 1), tv7 = tr.step(b, 8), tv3 = tr.step(b, 4);
    costs.push_back({td / t1, tv7 / t1 - 1, tv3 / t1 - 1});
    std::printf("%4d %10.3f %10.3f %8.4f | %4d %10.3f %7.3f | %4d %10.3f %7.3f\n", b, t1 * 1e3, td * 1e3, td / t1, 7,
                tv7 * 1e3, tv7 / t1 - 1, 3, tv3 * 1e3, tv3 / t1 - 1);
  }
  std::printf("\n## engine, greedy, synthetic acceptance: steady decode tok/s (all streams)\n");
  std::printf("%4s %10s | %4s %5s %10s %7s %7s %6s %7s\n", "C", "base", "K", "AL", "spec", "AL seen", "speedup", "ideal", "ratio");
  for (size_t i = 0; i < conc.size(); ++i) {
    const int c = conc[i];
    const Run base = engine_run(target, SpecOptions{}, c, prompt, new_tokens, threads);
    for (const Point& p : points) {
      SpecOptions s;
      s.draft_model = draft;
      s.num_speculative_tokens = p.k;
      s.method = SpecMethod::Greedy;
      s.draft_sample = DraftSample::Greedy;
      s.acceptance_length = p.al;
      const Run r = engine_run(target, s, c, prompt, new_tokens, threads);
      const double v = p.k == 7 ? costs[i].v7 : costs[i].v3;
      // The ideal at the AL this run saw (rounds cut short near the end pull it below the curve's).
      const double ideal = r.al / (1 + p.k * costs[i].c + v);
      const double speedup = r.tok_s / base.tok_s;
      std::printf("%4d %10.1f | %4d %5.2f %10.1f %7.2f %7.2f %6.2f %7.2f\n", c, base.tok_s, p.k, p.al, r.tok_s, r.al,
                  speedup, ideal, speedup / ideal);
      std::fflush(stdout);
    }
  }
  std::printf("\n## lanes vs replay, concurrency 1, synthetic AL = K/2 + 1\n");
  std::printf("%4s %8s %14s %14s %10s\n", "K", "rollback", "state bytes", "rollback bytes", "tok/s");
  const bool stateful = Model::load(target, threads)->state_bytes_per_slot() > 0;
  if (!stateful) std::printf("(no KDA layers: nothing to roll back)\n");
  for (int k : {3, 7}) {
    if (!stateful) break;
    for (const char* mode : {"lanes", "replay"}) {
      RuntimeLimits l;
      l.max_seqs = 1;
      l.num_kv_blocks = 4;
      l.spec_positions = k + 1;
      l.rollback = std::string(mode) == "replay" ? StateRollback::Replay : StateRollback::Lanes;
      auto m = Model::load(target, threads);
      m->allocate(l);
      SpecOptions s;
      s.draft_model = draft;
      s.num_speculative_tokens = k;
      s.method = SpecMethod::Greedy;
      s.draft_sample = DraftSample::Greedy;
      s.state_rollback = mode;
      s.acceptance_length = k / 2.0 + 1;
      const Run r = engine_run(target, s, 1, prompt, new_tokens, threads);
      std::printf("%4d %8s %14zu %14zu %10.1f\n", k, mode, m->state_bytes_per_slot(), m->rollback_bytes_per_slot(), r.tok_s);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
  try {
    return ds::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spec_bench: %s\n", e.what());
    return 1;
  }
}
