#include "engine/metrics.h"

namespace ds {

using namespace prometheus;

EngineMetrics::EngineMetrics() : registry_(std::make_shared<Registry>()) {
  auto& r = *registry_;
  requests_running = &BuildGauge()
                          .Name("deltaserve:num_requests_running")
                          .Help("Requests running in the engine (holding a state slot)")
                          .Register(r)
                          .Add({});
  requests_waiting = &BuildGauge()
                          .Name("deltaserve:num_requests_waiting")
                          .Help("Requests waiting for admission (queued or preempted)")
                          .Register(r)
                          .Add({});
  kv_pool_usage = &BuildGauge()
                       .Name("deltaserve:kv_pool_usage_perc")
                       .Help("Fraction of KV pool blocks in use, 0 to 1")
                       .Register(r)
                       .Add({});
  const Histogram::BucketBoundaries rows = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  step_rows = &BuildHistogram()
                   .Name("deltaserve:step_rows")
                   .Help("Token rows in one forward step (decode rows plus prefill tokens)")
                   .Register(r)
                   .Add({}, rows);
  step_sequences = &BuildHistogram()
                        .Name("deltaserve:step_sequences")
                        .Help("Sequences in one forward step")
                        .Register(r)
                        .Add({}, Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
  step_seconds = &BuildHistogram()
                      .Name("deltaserve:step_duration_seconds")
                      .Help("Wall time of one engine step: schedule, forward, sample, stream")
                      .Register(r)
                      .Add({}, Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                           0.25, 0.5, 1, 2.5, 5, 10});
  prompt_tokens = &BuildCounter()
                       .Name("deltaserve:prompt_tokens_total")
                       .Help("Prompt tokens of admitted requests (counted once per request)")
                       .Register(r)
                       .Add({});
  generation_tokens = &BuildCounter()
                           .Name("deltaserve:generation_tokens_total")
                           .Help("Tokens generated")
                           .Register(r)
                           .Add({});
  ttft = &BuildHistogram()
              .Name("deltaserve:time_to_first_token_seconds")
              .Help("Seconds from arrival to the first generated token")
              .Register(r)
              .Add({}, Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                   2.5, 5, 10, 20, 40, 80});
  itl = &BuildHistogram()
             .Name("deltaserve:inter_token_latency_seconds")
             .Help("Seconds between consecutive generated tokens of one request")
             .Register(r)
             .Add({}, Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                                  0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5});
  e2e = &BuildHistogram()
             .Name("deltaserve:e2e_request_latency_seconds")
             .Help("Seconds from arrival to the end of a request")
             .Register(r)
             .Add({}, Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40,
                                                  80, 160, 320});
  preemptions = &BuildCounter()
                     .Name("deltaserve:num_preemptions_total")
                     .Help("Running sequences preempted for lack of KV blocks (recomputed later)")
                     .Register(r)
                     .Add({});
  auto counter = [&](const char* name, const char* help) {
    return &BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  auto gauge = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  prefix_queries = counter("deltaserve:prefix_cache_queries_total",
                           "Prompt tokens looked up in the prefix cache (once per request)");
  prefix_hits = counter("deltaserve:prefix_cache_hits_total",
                        "Prompt tokens found in the prefix cache: KV blocks and recurrent state");
  cached_blocks = gauge("deltaserve:prefix_cache_blocks", "KV blocks findable by their prefix hash");
  snapshots_held = gauge("deltaserve:state_snapshots", "State snapshots held");
  spec_draft_tokens = counter("deltaserve:spec_draft_tokens_total", "Draft tokens proposed (draft model or suffix tries)");
  spec_accepted_tokens = counter("deltaserve:spec_accepted_tokens_total", "Draft tokens the target accepted");
  spec_acceptance_length = &BuildHistogram()
                                .Name("deltaserve:spec_acceptance_length")
                                .Help("Tokens a speculative round emitted: 1 + accepted draft tokens")
                                .Register(r)
                                .Add({}, Histogram::BucketBoundaries{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  spec_position_drafted = &BuildCounter()
                               .Name("deltaserve:spec_position_drafted_total")
                               .Help("Rounds that proposed a draft token at this position (1 = first)")
                               .Register(r);
  spec_position_accepted = &BuildCounter()
                                .Name("deltaserve:spec_position_accepted_total")
                                .Help("Rounds whose draft token at this position was accepted")
                                .Register(r);
  spec_draft_seconds = counter("deltaserve:spec_draft_seconds_total", "Seconds of step time spent in the draft model");
  spec_verify_seconds = counter("deltaserve:spec_verify_seconds_total",
                                "Seconds of step time in target forwards with verify rows, and verification");
  spec_rollback_seconds = counter("deltaserve:spec_rollback_seconds_total",
                                  "Seconds of step time rolling states back to the accepted tokens");
  spec_chosen_draft_tokens = &BuildHistogram()
                                  .Name("deltaserve:spec_chosen_draft_tokens")
                                  .Help("Draft tokens chosen for a decoding sequence in a step (auto: by the cost model)")
                                  .Register(r)
                                  .Add({}, Histogram::BucketBoundaries{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16});
  spec_predicted_accepted_tokens =
      counter("deltaserve:spec_predicted_accepted_tokens_total",
              "Draft tokens the auto cost model expected to be accepted (against spec_accepted_tokens_total)");
  spec_cost_offset = gauge("deltaserve:spec_cost_offset_seconds",
                           "auto's step-cost model: seconds a step takes beyond the rows measured at start-up");
  spec_cost_context = gauge("deltaserve:spec_cost_context_seconds_per_ktoken",
                            "auto's step-cost model: seconds per thousand tokens of context the step's rows attend");
  spec_no_proposal = counter("deltaserve:spec_no_proposal_total", "Decoding sequences whose suffix tries proposed nothing");
  step_seconds_total = counter("deltaserve:step_seconds_total", "Seconds of step time, every step");
  logits_processing_seconds = counter("deltaserve:logits_processing_seconds_total",
                                      "Seconds of step time applying penalties, logit bias and output constraints");
  constrained_tokens = counter("deltaserve:constrained_tokens_total",
                               "Tokens sampled under an output constraint (response_format, forced tool calls)");
  rank_layout = &BuildGauge()
                     .Name("deltaserve:rank_layout")
                     .Help("How the model is spread over processes: tensor-parallel size, decode-context-parallel size, ranks")
                     .Register(r);
  rank_memory_bytes = &BuildGauge()
                           .Name("deltaserve:rank_memory_bytes")
                           .Help("Each rank's memory: its weights shard, its part of the KV pool, its part of the slots' states")
                           .Register(r);
  spec_synthetic = &BuildGauge()
                        .Name("deltaserve:spec_synthetic_acceptance")
                        .Help("Synthetic acceptance (benchmarks only): the mean acceptance length forced, and its source")
                        .Register(r);
  finished = &BuildCounter()
                  .Name("deltaserve:request_success_total")
                  .Help("Requests finished, by finish reason")
                  .Register(r);
  errors = &BuildCounter()
                .Name("deltaserve:request_errors_total")
                .Help("Requests refused or failed, by kind")
                .Register(r);
  // Pre-create the common kinds so dashboards see zeros rather than absent series.
  for (const char* k : {"invalid_request", "authentication", "not_found", "queue_full", "engine"})
    errors->Add({{"kind", k}});
}

void EngineMetrics::request_error(const std::string& kind) {
  std::lock_guard<std::mutex> lock(errors_mu_);
  errors->Add({{"kind", kind}}).Increment();
}

prometheus::Counter* EngineMetrics::add_counter(const std::string& name, const std::string& help) {
  return &prometheus::BuildCounter().Name("deltaserve:" + name).Help(help).Register(*registry_).Add({});
}

}  // namespace ds
