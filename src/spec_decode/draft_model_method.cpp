// --draft-method draft_model: a smaller model of the same tokenizer drafts token by token within
// the plan, mirroring the target's memory (spec_decode/drafter.h).
#include <algorithm>

#include "model/model.h"
#include "spec_decode/draft_method.h"
#include "spec_decode/drafter.h"

namespace ds {

namespace {

class DraftModelMethod final : public DraftMethod {
 public:
  DraftModelMethod(std::unique_ptr<Model> draft, DraftSample sample, int k) : drafter_(std::move(draft), sample, k) {}
  const char* name() const override { return "draft_model"; }
  Model* mirror() override { return &drafter_.model(); }
  void set_dtypes(KvDtype kv, ActivationDtype act) override {
    drafter_.model().set_kv_dtype(kv);
    drafter_.model().set_activation_dtype(act);
  }
  void allocate(const RuntimeLimits& target) override { drafter_.allocate(target); }
  // Until drafting is observed: a draft forward costs its share of the target's weight reads.
  double draft_cost_share(const Model& target) const override {
    return double(drafter_.model().decode_weight_bytes()) / double(std::max<size_t>(target.decode_weight_bytes(), 1));
  }
  bool may_keep_probs() const override { return drafter_.sample_method() == DraftSample::Probabilistic; }
  bool keeps_probs(const SamplingFilter& f) const override { return drafter_.keeps_probs(f); }
  bool drafts_in_plan() const override { return true; }
  void draft(std::span<DraftJob> jobs) override { drafter_.propose(jobs); }
  void commit(int slot, int keep) override { drafter_.commit(slot, keep); }

 private:
  Drafter drafter_;
};

}  // namespace

std::unique_ptr<DraftMethod> make_draft_model_method(const SpecOptions& o, Model& target) {
  // The draft runs on the target's threads (one pool: the two never spin against each other).
  return std::make_unique<DraftModelMethod>(Model::load_sharing_threads(o.draft_model, target), o.draft_sample,
                                            o.num_speculative_tokens);
}

}  // namespace ds
