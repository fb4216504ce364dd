// The engine's Prometheus metrics, all under the `deltaserve:` prefix. prometheus-cpp metrics
// are thread-safe: the engine thread updates most of them, HTTP threads count request errors,
// and /metrics serialises the registry from any thread.
#pragma once
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>

namespace ds {

class EngineMetrics {
 public:
  EngineMetrics();

  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> registry_ptr() { return registry_; }

  // Kinds: invalid_request, authentication, not_found, queue_full, shutting_down, engine,
  // internal. A counter per kind is created on first use.
  void request_error(const std::string& kind);
  // A counter named deltaserve:<name> (the cache's own counts, described by the cache).
  prometheus::Counter* add_counter(const std::string& name, const std::string& help);

  prometheus::Gauge* requests_running;
  prometheus::Gauge* requests_waiting;
  prometheus::Gauge* kv_pool_usage;
  prometheus::Histogram* step_rows;       // tokens fed in one forward step
  prometheus::Histogram* step_sequences;  // sequences in one forward step
  prometheus::Histogram* step_seconds;    // wall time of one step (schedule, forward, sample)
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Histogram* ttft;  // seconds from arrival to first token
  prometheus::Histogram* itl;   // seconds between consecutive tokens of a request
  prometheus::Histogram* e2e;   // seconds from arrival to finish
  prometheus::Counter* preemptions;
  // Prefix cache (token counts, as vLLM's prefix_cache_{queries,hits}).
  prometheus::Counter* prefix_queries;
  prometheus::Counter* prefix_hits;
  prometheus::Gauge* cached_blocks;
  prometheus::Gauge* snapshots_held;
  // Speculative decoding (docs/speculative-decoding.md).
  prometheus::Counter* spec_draft_tokens;
  prometheus::Counter* spec_accepted_tokens;
  prometheus::Histogram* spec_acceptance_length;  // per round: 1 + accepted draft tokens
  prometheus::Family<prometheus::Counter>* spec_position_drafted;   // label: position (1..K)
  prometheus::Family<prometheus::Counter>* spec_position_accepted;  // label: position
  prometheus::Counter* spec_draft_seconds;     // drafting (the draft model's forwards)
  prometheus::Counter* spec_verify_seconds;    // target forwards of steps with verify rows, and verification
  prometheus::Counter* spec_rollback_seconds;  // rolling states back after verification
  prometheus::Counter* step_seconds_total;     // every step, for the shares of the three above
  // --num-speculative-tokens auto (spec_decode/draft_length.h) and suffix drafting.
  prometheus::Histogram* spec_chosen_draft_tokens;        // K chosen per decoding sequence and step
  prometheus::Counter* spec_predicted_accepted_tokens;    // the cost model's expected accepted tokens
  prometheus::Counter* spec_no_proposal;                  // suffix rounds where no trie matched
  prometheus::Gauge* spec_cost_offset;                    // the cost model's online fit: seconds per step
  prometheus::Gauge* spec_cost_context;                   // and seconds per thousand tokens attended
  // Logit processing (engine/logit_processor.h): its time, and the tokens drawn under a constraint.
  prometheus::Counter* logits_processing_seconds;
  prometheus::Counter* constrained_tokens;
  prometheus::Family<prometheus::Gauge>* rank_layout;        // labels: kind (tp, dcp, ranks)
  prometheus::Family<prometheus::Gauge>* rank_memory_bytes;  // labels: rank, kind (weights, kv_pool, state)
  prometheus::Family<prometheus::Gauge>* spec_synthetic;  // AL, labels: source; only in synthetic mode
  prometheus::Family<prometheus::Counter>* finished;  // label: finish_reason
  prometheus::Family<prometheus::Counter>* errors;    // label: kind

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex errors_mu_;  // Family::Add is thread-safe, but keep first-use creation tidy
};

}  // namespace ds
