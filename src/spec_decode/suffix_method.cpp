// --draft-method suffix: proposals from suffix tries over the session's own tokens and recent
// outputs, before the schedule, with no draft model (spec_decode/suffix_proposer.h).
#include <algorithm>

#include "spec_decode/draft_method.h"
#include "spec_decode/suffix_proposer.h"

namespace ds {

namespace {

class SuffixMethod final : public DraftMethod {
 public:
  explicit SuffixMethod(const SuffixOptions& o) : proposer_(o) {}
  const char* name() const override { return "suffix"; }
  bool proposes_early() const override { return true; }
  void propose(std::span<ProposeJob> jobs) override {
    for (ProposeJob& j : jobs) {
      proposer_.observe(j.owner, j.history);
      const SuffixTrie::Proposal p = proposer_.propose(j.owner, j.history, j.k);
      j.proposed = int(std::min(p.tokens.size(), size_t(j.k)));
      std::copy_n(p.tokens.begin(), j.proposed, j.tokens);
      if (j.proposed == 0) ++misses_;
    }
  }
  uint64_t misses() const override { return misses_; }
  void retire(uint64_t owner, std::span<const int32_t> output) override { proposer_.retire(owner, output); }

 private:
  SuffixProposer proposer_;
  uint64_t misses_ = 0;
};

}  // namespace

std::unique_ptr<DraftMethod> make_suffix_method(const SpecOptions& o, Model&) { return std::make_unique<SuffixMethod>(o.suffix); }

}  // namespace ds
