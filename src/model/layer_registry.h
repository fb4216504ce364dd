// Which class runs each kind of layer part: the one table the model's loader reads (a mixer or
// FFN kind from the config's per-layer lists to the class that implements model/mixer.h or
// model/ffn.h). Adding a mixer: its class in a file of its own, its MixerKind in config.h, and
// one line in layer_registry.cpp.
#pragma once
#include <memory>

#include "model/config.h"
#include "model/ffn.h"
#include "model/mixer.h"
#include "model/weight_loader.h"

namespace ds {

// local: the shape this process's layers hold (a tensor-parallel shard's, or the whole
// model's); w: the layer's weights ("model.layers.<i>."). Throws ds::Error as the class's
// constructor does.
std::unique_ptr<Mixer> make_mixer(MixerKind kind, const ModelConfig& local, const WeightLoader& w);
std::unique_ptr<Ffn> make_ffn(FfnKind kind, const ModelConfig& local, const WeightLoader& w);

}  // namespace ds
