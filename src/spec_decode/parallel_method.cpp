// --draft-method parallel: one forward of a drafter on the target's hidden states proposes a
// whole round before the schedule (spec_decode/parallel_drafter.h); the target's committed rows
// feed its context after every step.
#include "model/model.h"
#include "spec_decode/draft_method.h"
#include "spec_decode/parallel_drafter.h"

namespace ds {

namespace {

class ParallelMethod final : public DraftMethod {
 public:
  ParallelMethod(const SpecOptions& o, Model& target)
      : drafter_(o.draft_model, target, o.draft_sample, o.num_speculative_tokens, o.confidence_threshold),
        sample_(o.draft_sample), k_(o.num_speculative_tokens) {}
  const char* name() const override { return "parallel"; }
  void set_dtypes(KvDtype, ActivationDtype act) override { drafter_.set_activation_dtype(act); }
  void prepare_target(Model& target) override {
    target_ = &target;
    // The drafter takes a chunk's last context_window committed rows; a verify chunk of K + 1
    // rows may commit only its first, so K more rows at the end must be tapped too.
    target.set_hidden_taps(drafter_.config().target_layer_ids, drafter_.config().context_window + k_);
    width_ = drafter_.config().target_layer_ids.size() * size_t(target.config().hidden_size);
  }
  void allocate(const RuntimeLimits& target) override { drafter_.allocate(target.max_seqs, target.max_batch_tokens); }
  // A round is drafted whole before the schedule, so by the time a length is chosen its cost is
  // spent whatever the length: a verified position costs only its verify row. (A price per
  // position here made auto choose shorter rounds for nothing.)
  double draft_cost_share(const Model&) const override { return 0.0; }
  bool may_keep_probs() const override { return sample_ == DraftSample::Probabilistic; }
  bool keeps_probs(const SamplingFilter& f) const override { return drafter_.keeps_probs(f); }
  bool proposes_early() const override { return true; }
  void propose(std::span<ProposeJob> jobs) override { drafter_.propose(jobs); }
  bool observes() const override { return true; }
  void begin_observe() override { drafter_.begin_observe(); }
  void observe(int slot, uint64_t owner, int32_t first_pos, int32_t row, const int32_t* tokens, int rows) override {
    drafter_.add_observed(slot, owner, first_pos, target_->hidden_taps() + size_t(row) * width_, tokens, rows);
  }
  void end_observe() override { drafter_.end_observe(); }

 private:
  ParallelDrafter drafter_;
  DraftSample sample_;
  int k_;
  const Model* target_ = nullptr;
  size_t width_ = 0;  // floats of one row's taps
};

}  // namespace

std::unique_ptr<DraftMethod> make_parallel_method(const SpecOptions& o, Model& target) {
  return std::make_unique<ParallelMethod>(o, target);
}

}  // namespace ds
