// Where draft tokens come from, behind one interface: a draft model (spec_decode/drafter.h),
// suffix drafting (spec_decode/suffix_proposer.h) and the parallel drafter on the target's hidden
// states (spec_decode/parallel_drafter.h) are each a DraftMethod, made by name from the registry
// (draft_methods.cpp). The engine's speculator (engine/speculation.h) drives whichever it holds at
// the step's fixed points; each method answers the hooks it needs and leaves the rest.
//
// A method drafts at one of two points of a step:
//   early    before the schedule, from what is committed: one ProposeJob per decoding sequence
//            that may speculate (suffix, parallel), so the scheduler sizes the verify chunks to
//            the proposals;
//   in plan  after the schedule, mirroring the target: one DraftJob per planned chunk, filling
//            the verify chunks' placeholders (a draft model, whose memory mirrors the target's).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/activation_dtype.h"
#include "core/kv_dtype.h"
#include "kernels/sampling.h"
#include "spec_decode/drafter.h"
#include "spec_decode/spec_options.h"

namespace ds {

class Model;
struct RuntimeLimits;

// One decoding sequence's round, drafted before the schedule.
struct ProposeJob {
  int32_t slot = 0;
  uint64_t owner = 0;                 // the sequence in the slot (its stream id)
  std::span<const int32_t> history;   // its tokens so far, the pending token last
  int32_t token = 0;                  // the pending token x_n, whose position n the target computes next
  int32_t pos = 0;                    // n
  int k = 0;                          // the most tokens to propose
  SamplingFilter filter;              // the request's: probabilistic drafting draws from it
  std::function<double()> uniform;
  bool coupled = false;               // a reproducible request: draft_pick.h's coupled draw
  int32_t* tokens = nullptr;          // out: up to k draft tokens
  float* q = nullptr;                 // out: their distributions (k rows of vocab floats), or null
  int proposed = 0;                   // out: how many; fewer than k where the method found no more
};

class DraftMethod {
 public:
  virtual ~DraftMethod() = default;
  // Its --draft-method name.
  virtual const char* name() const = 0;

  // ---- start-up, in this order ----
  // A draft model whose memory mirrors the target's (its KV in the same block ids, its state in
  // the same slots): the prefix cache stores both, and start-up checks it against the target.
  virtual Model* mirror() { return nullptr; }
  // The element types the target runs with.
  virtual void set_dtypes(KvDtype, ActivationDtype) {}
  // Before the target allocates: what it needs the target to keep (hidden-state taps).
  virtual void prepare_target(Model&) {}
  // After the target allocates: its own memory for the target's limits.
  virtual void allocate(const RuntimeLimits&) {}
  // auto (spec_decode/draft_length.h): a draft position's cost until drafting is observed, as a
  // share of a one-row target step (0: drafting is spent before the length is chosen, or free).
  virtual double draft_cost_share(const Model&) const { return 0; }

  // Probabilistic drafting keeps q rows for the verifier (for a request with this filter).
  virtual bool may_keep_probs() const { return false; }
  virtual bool keeps_probs(const SamplingFilter&) const { return false; }

  // ---- drafting ----
  virtual bool proposes_early() const { return false; }
  virtual void propose(std::span<ProposeJob>) {}
  virtual bool drafts_in_plan() const { return false; }
  virtual void draft(std::span<DraftJob>) {}
  // After verification: `keep` of the slot's speculative draft tokens stood (in-plan drafting).
  virtual void commit(int /*slot*/, int /*keep*/) {}
  // Early rounds that found nothing to propose, so far.
  virtual uint64_t misses() const { return 0; }

  // ---- after accept: the target's committed rows (the parallel drafter's context) ----
  virtual bool observes() const { return false; }
  virtual void begin_observe() {}
  // `rows` committed rows of `slot`'s sequence from position first_pos, at batch row `row` of the
  // step just run, with their input tokens.
  virtual void observe(int /*slot*/, uint64_t /*owner*/, int32_t /*first_pos*/, int32_t /*row*/,
                       const int32_t* /*tokens*/, int /*rows*/) {}
  virtual void end_observe() {}

  // A request ended with this output (suffix drafting keeps it for later rounds).
  virtual void retire(uint64_t /*owner*/, std::span<const int32_t> /*output*/) {}
};

// ---- the registry (draft_methods.cpp) ----

// What makes a method: its resolved options and the target it drafts for (a draft model shares
// its threads). Throws ds::Error, one line, when the method cannot start.
using DraftMethodFactory = std::unique_ptr<DraftMethod> (*)(const SpecOptions&, Model& target);

struct DraftMethodEntry {
  const char* name;
  // What drafter_name() reports for it (/v1/models, generate's JSON).
  const char* label;
  DraftMethodFactory make;
};

// Every method by name, in the order --draft-method lists them.
std::span<const DraftMethodEntry> draft_methods();
const DraftMethodEntry* find_draft_method(const std::string& name);
// The method o.draft_method names (resolve_spec_options fills it).
std::unique_ptr<DraftMethod> make_draft_method(const SpecOptions& o, Model& target);

// The factories, one per method's file.
std::unique_ptr<DraftMethod> make_draft_model_method(const SpecOptions& o, Model& target);
std::unique_ptr<DraftMethod> make_suffix_method(const SpecOptions& o, Model& target);
std::unique_ptr<DraftMethod> make_parallel_method(const SpecOptions& o, Model& target);

}  // namespace ds
