// The registration table of layer kinds. A table, not static self-registration: the model is a
// static library, and a linker drops object files nothing references, registrations with them.

#include "model/layer_registry.h"

#include <string>

#include "core/error.h"
#include "model/dense_ffn.h"
#include "model/gqa_mixer.h"
#include "model/kda_mixer.h"
#include "model/mla_mixer.h"
#include "model/moe_ffn.h"

namespace ds {

namespace {

template <class T>
std::unique_ptr<Mixer> make(const ModelConfig& c, const WeightLoader& w) {
  return std::make_unique<T>(c, w);
}

std::unique_ptr<Ffn> make_dense(const ModelConfig& c, const WeightLoader& w) {
  return std::make_unique<DenseFfn>(w, "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                                    c.hidden_size, c.intermediate_size);
}

std::unique_ptr<Ffn> make_moe(const ModelConfig& c, const WeightLoader& w) { return std::make_unique<MoeFfn>(c, w); }

struct MixerEntry {
  MixerKind kind;
  std::unique_ptr<Mixer> (*make)(const ModelConfig&, const WeightLoader&);
};
constexpr MixerEntry kMixers[] = {
    {MixerKind::Kda, make<KdaMixer>},
    {MixerKind::Mla, make<MlaMixer>},
    {MixerKind::Gqa, make<GqaMixer>},
};

struct FfnEntry {
  FfnKind kind;
  std::unique_ptr<Ffn> (*make)(const ModelConfig&, const WeightLoader&);
};
constexpr FfnEntry kFfns[] = {
    {FfnKind::Dense, make_dense},
    {FfnKind::Moe, make_moe},
};

}  // namespace

std::unique_ptr<Mixer> make_mixer(MixerKind kind, const ModelConfig& local, const WeightLoader& w) {
  for (const MixerEntry& e : kMixers)
    if (e.kind == kind) return e.make(local, w);
  throw Error("no mixer registered for layer kind " + std::to_string(int(kind)) + " (model/layer_registry.cpp)");
}

std::unique_ptr<Ffn> make_ffn(FfnKind kind, const ModelConfig& local, const WeightLoader& w) {
  for (const FfnEntry& e : kFfns)
    if (e.kind == kind) return e.make(local, w);
  throw Error("no FFN registered for layer kind " + std::to_string(int(kind)) + " (model/layer_registry.cpp)");
}

}  // namespace ds
