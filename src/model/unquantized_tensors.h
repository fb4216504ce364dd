// The tensors of the architectures DeltaServe runs that stay in float: the ones the layers read
// only as numbers (embeddings, norms, the MoE router) and the ones a block format costs too much
// accuracy in (MLA's kv_b_proj, split per head at load; the KDA gates' small low-rank
// projections, whose outputs pass through exponentials and sigmoids where a small error grows).
// `deltaserve quantize` keeps them (convert/quantize.h), and reading a GGUF file that quantized
// one dequantizes it at load (model/gguf_model.cpp). Knowing tensor names, it belongs with the
// architectures; a new architecture adds its own fragments here.
#pragma once
#include <string>
#include <vector>

namespace ds {

// Fragments of Hugging Face tensor names: a name containing one is kept.
extern const std::vector<std::string> kQuantizeKeptByDefault;

}  // namespace ds
