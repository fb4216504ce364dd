// Speculative decoding benchmark (docs/speculative-decoding.md, "Measured"). Not a test: it
// prints figures and ratios. For one target + draft pair:
//   1. step costs from Model::forward alone, at B sequences (B = each concurrency) of
//      prompt + new_tokens / 2 tokens (the mean context of step 2's runs), sampled in turn so
//      drift on a shared machine moves them together:
//        t1  a B-row decode step of the target
//        tv  B verify chunks of K+1 rows (the target's speculative step)
//        the K draft forwards of a round, right after the verify step as the engine runs them
//      c = those K forwards / (K t1) (the draft's cost per proposed token, its cold first forward
//      included), v = tv / t1 - 1 (the verify's extra); ideal speedup AL / (1 + K c + v).
//   2. the engine at each concurrency, greedy, synthetic acceptance: steady-state decode tok/s
//      without speculation and with (K, AL) = (7, 3.84) and (3, 3.00) (the golden curve's), the
//      speedup, and measured / ideal. DS_BENCH_REPEATS turns (default 3), each a share of the
//      step-cost samples of 1. and then the runs base, K 7, K 3, so the costs and the runs see
//      the same machine; medians are printed, and each turn's speedup beside its own ideal.
//   3. lanes vs replay at K 3 and 7, concurrency 1: rollback bytes per sequence and tok/s.
// Run:
//   [DS_BENCH_ACTIVATION_DTYPE=f32|bf16] [DS_BENCH_REPEATS=3] build/bench/spec_decode/spec_bench TARGET_DIR DRAFT_DIR
//   [concurrencies=1,4,16,64] [new_tokens=256] [prompt=64] [threads=0]
// DS_BENCH_ACTIVATION_DTYPE: how activations meet bf16 weights, target and draft alike (serve
// --activation-dtype); every figure of a run uses it. DS_BENCH_PROFILE_STEPS=N: each engine run
// logs its step profile every N steps (engine/step_profile.h), to see where a round goes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "engine/speculation.h"
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

  // Seconds of one step with `rows` tokens per sequence at the prompt's end (speculative chunks
  // when rows > 1; the committed state is untouched, so every repetition is the same step).
  double once(int seqs, int rows) {
    Batch& b = batches[rows];
    if (b.chunks.empty()) {
      for (int s = 0; s < seqs; ++s) {
        SeqChunk c;
        c.slot = s;
        c.block_table = tables[size_t(s)].data();
        c.start_pos = prompt;
        c.num_tokens = rows;
        c.token_offset = int32_t(b.toks.size());
        c.num_logits = rows;
        c.spec_lane = rows > 1 ? 0 : -1;
        for (int i = 0; i < rows; ++i) b.toks.push_back(int32_t((i * 7 + s + 3) % vocab));
        b.chunks.push_back(c);
      }
      b.logits.resize(size_t(seqs * rows) * size_t(vocab));
    }
    const auto t0 = SteadyClock::now();
    model->forward({b.toks, b.chunks}, b.logits.data());
    return seconds_since(t0);
  }

 private:
  struct Batch {
    std::vector<int32_t> toks;
    std::vector<SeqChunk> chunks;
    std::vector<float> logits;
  };
  std::map<int, Batch> batches;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The step costs of one concurrency, sampled in turn so that drift on a shared machine moves
// them together: a decode step (t1), and per K a verify step followed by the K draft forwards
// of a round, as the engine runs them (the first finds the draft's weights pushed out of cache
// by the target's step, which a draft timed in a loop of its own would not show).
struct StepCosts {
  double t1 = 0, td = 0;  // td: a draft forward, the mean over a K = 7 round
  double tv[2] = {}, draft[2] = {};  // per K of kPoints: the verify step, the round's draft forwards
  double c[2] = {}, v[2] = {};       // per K: c = draft / (K t1), v = tv / t1 - 1
};
struct StepSamples {
  std::vector<double> t1, tv[2], draft[2];
};
// `reps` samples of each cost after two unrecorded ones (the first steps after an engine run
// find cold caches), appended to *out.
void sample_costs(StepRig& tr, StepRig& dr, int b, const int (&ks)[2], int reps, StepSamples* out) {
  for (int r = 0; r < reps + 2; ++r) {
    const double a = tr.once(b, 1);
    double v[2], d[2];
    for (int i = 0; i < 2; ++i) {
      v[i] = tr.once(b, ks[i] + 1);
      d[i] = 0;
      for (int j = 0; j < ks[i]; ++j) d[i] += dr.once(b, 1);
    }
    if (r < 2) continue;  // warm-up
    out->t1.push_back(a);
    for (int i = 0; i < 2; ++i) {
      out->tv[i].push_back(v[i]);
      out->draft[i].push_back(d[i]);
    }
  }
}
StepCosts costs_of(const StepSamples& s, const int (&ks)[2]) {
  StepCosts c;
  c.t1 = median(s.t1);
  for (int i = 0; i < 2; ++i) {
    c.tv[i] = median(s.tv[i]);
    c.draft[i] = median(s.draft[i]);
    c.c[i] = c.draft[i] / (ks[i] * c.t1);
    c.v[i] = c.tv[i] / c.t1 - 1;
  }
  c.td = c.draft[0] / ks[0];
  return c;
}

struct Run {
  double tok_s = 0;   // steady-state decode tokens per second, all streams together
  double al = 0;      // mean tokens per round (speculation only)
  size_t rollback_bytes = 0;
};

// Concurrency c, greedy, every stream `new_tokens` long: tokens arriving while all c streams
// decode (after the last first token, before the first stream ends), over that window.
// seed: the requests' (synthetic acceptance draws from each request's stream): repeats with
// other seeds sample the acceptance distribution again instead of replaying one draw.
Run engine_run(const std::string& target, const SpecOptions& spec, int c, int prompt, int new_tokens, int threads,
               uint64_t seed = 0) {
  EngineConfig ec;
  ec.max_num_seqs = c;
  ec.max_num_batched_tokens = std::max(2048, c * 17);
  ec.max_model_len = prompt + new_tokens + 8;
  ec.threads = threads;
  ec.prefix.enabled = false;
  ec.activation_dtype = bench_activation_dtype();
  if (const char* p = std::getenv("DS_BENCH_PROFILE_STEPS")) ec.profile_steps = std::atoi(p);
  ec.spec = spec;
  std::unique_ptr<Model> model = Model::load(target, threads);
  std::unique_ptr<Speculator> speculator = make_speculator(ec.spec, *model);
  Engine engine(std::move(model), std::move(speculator), ec);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < c; ++i) {
    Request r;
    for (int t = 0; t < prompt; ++t) r.prompt.push_back(int32_t((t * 131 + i * 17 + 1) % 8000));
    r.max_tokens = new_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.seed = seed * 1000 + uint64_t(i);
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
  const int ks[2] = {points[0].k, points[1].k};
  // Engine runs per configuration, in turn (base, K 7, K 3, base, ...): medians of each.
  const char* reps_env = std::getenv("DS_BENCH_REPEATS");
  const int repeats = std::max(1, reps_env ? std::atoi(reps_env) : 3);

  std::printf("target %s\ndraft  %s\nactivation dtype %s\n", target.c_str(), draft.c_str(),
              std::string(activation_dtype_name(bench_activation_dtype())).c_str());
  {
    auto t = Model::load(target, threads);
    auto d = Model::load(draft, threads);
    std::printf("decode weight bytes: target %zu, draft %zu (byte ratio %.4f)\n\n", t->decode_weight_bytes(),
                d->decode_weight_bytes(), double(d->decode_weight_bytes()) / double(t->decode_weight_bytes()));
  }
  // The step costs are taken at the mean context of the engine runs' window (their streams go
  // from `prompt` to prompt + new_tokens): a verify's K + 1 rows each attend over the context,
  // so v grows with it faster than a decode step does, and costs taken at the prompt's end would
  // price the runs' rounds below what they cost (the ideal above what the runs can reach).
  const int context = prompt + new_tokens / 2;
  std::printf("## per concurrency B: step costs (Model::forward at context %d, the engine window's mean), then the\n"
              "## engine runs. Each of the %d turns takes a share of the 40 cost samples, then runs base, K 7, K 3,\n"
              "## so the costs and the runs see the same machine (it drifts by tens of percent within minutes).\n",
              context, repeats);
  std::printf("## costs: medians of all samples; c = a round's K draft forwards (right after the target's step) / (K t1),\n"
              "## v = tv / t1 - 1. engine: steady decode tok/s (all streams), medians over turns; speedup: the median\n"
              "## of each turn's spec / base; ideal = AL seen / (1 + K c + v) from all samples; ratio: the median of\n"
              "## each turn's speedup over the ideal from that turn's own samples; at AL: each turn's speedup scaled\n"
              "## to the curve's AL (AL / AL seen), median\n");
  const int per_turn = std::max(8, (40 + repeats - 1) / repeats);
  for (const int c : conc) {
    StepRig tr(target, c, context, 8, threads);
    StepRig dr(draft, c, context, 8, threads, tr.model.get());
    StepSamples all;
    std::vector<StepCosts> turn_costs;
    std::vector<double> base, tok[2], al[2], ratio[2];
    for (int r = 0; r < repeats; ++r) {
      StepSamples mine;
      sample_costs(tr, dr, c, ks, per_turn, &mine);
      turn_costs.push_back(costs_of(mine, ks));
      for (const double x : mine.t1) all.t1.push_back(x);
      for (int i = 0; i < 2; ++i) {
        for (const double x : mine.tv[i]) all.tv[i].push_back(x);
        for (const double x : mine.draft[i]) all.draft[i].push_back(x);
      }
      const double b = engine_run(target, SpecOptions{}, c, prompt, new_tokens, threads).tok_s;
      base.push_back(b);
      for (int p = 0; p < 2; ++p) {
        SpecOptions s;
        s.draft_model = draft;
        s.num_speculative_tokens = points[p].k;
        s.method = SpecMethod::Greedy;
        s.draft_sample = DraftSample::Greedy;
        s.acceptance_length = points[p].al;
        const Run run = engine_run(target, s, c, prompt, new_tokens, threads, uint64_t(r));
        tok[p].push_back(run.tok_s);
        al[p].push_back(run.al);
        ratio[p].push_back(run.tok_s / b);
      }
    }
    const StepCosts m = costs_of(all, ks);
    std::printf("\n%4s %9s %9s | %3s %9s %7s %7s | %3s %9s %7s %7s\n", "B", "t1 ms", "td ms", "K", "tv ms", "c", "v", "K",
                "tv ms", "c", "v");
    std::printf("%4d %9.3f %9.3f | %3d %9.3f %7.4f %7.3f | %3d %9.3f %7.4f %7.3f\n", c, m.t1 * 1e3, m.td * 1e3, ks[0],
                m.tv[0] * 1e3, m.c[0], m.v[0], ks[1], m.tv[1] * 1e3, m.c[1], m.v[1]);
    std::printf("%4s %10s | %4s %5s %10s %7s %7s %6s %7s %7s\n", "C", "base", "K", "AL", "spec", "AL seen", "speedup",
                "ideal", "ratio", "at AL");
    for (int p = 0; p < 2; ++p) {
      // The ideal at the AL the runs saw (rounds cut short near the end pull it below the curve's).
      const double seen = median(al[p]);
      const double ideal = seen / (1 + points[p].k * m.c[p] + m.v[p]);
      const double speedup = median(ratio[p]);
      // A round costs the same whatever it accepts (K draft forwards, one verify), so a run's
      // speedup at the curve's AL is its speedup scaled by AL / AL seen: the draws of 256
      // tokens' rounds scatter the AL seen by about +-0.2 around the curve's.
      std::vector<double> at_al, own;
      for (int r = 0; r < repeats; ++r) {
        const StepCosts& t = turn_costs[size_t(r)];
        at_al.push_back(ratio[p][size_t(r)] * points[p].al / al[p][size_t(r)]);
        own.push_back(ratio[p][size_t(r)] / (al[p][size_t(r)] / (1 + points[p].k * t.c[p] + t.v[p])));
      }
      std::printf("%4d %10.1f | %4d %5.2f %10.1f %7.2f %7.2f %6.2f %7.2f %7.2f   turns (speedup @ AL seen / own ideal):", c,
                  median(base), points[p].k, points[p].al, median(tok[p]), seen, speedup, ideal, median(own),
                  median(at_al));
      for (int r = 0; r < repeats; ++r) {
        const StepCosts& t = turn_costs[size_t(r)];
        std::printf(" %.2f@%.2f/%.2f", ratio[p][size_t(r)], al[p][size_t(r)],
                    al[p][size_t(r)] / (1 + points[p].k * t.c[p] + t.v[p]));
      }
      std::printf("\n");
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
  ds::log_to_stderr();  // the tables go to stdout, the engine's log lines not among them
  try {
    return ds::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spec_bench: %s\n", e.what());
    return 1;
  }
}
