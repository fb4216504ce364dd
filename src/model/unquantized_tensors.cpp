#include "model/unquantized_tensors.h"

namespace ds {

const std::vector<std::string> kQuantizeKeptByDefault = {
    "embed_tokens", "norm", "block_sparse_moe.gate.", "kv_b_proj", "f_a_proj", "f_b_proj", "g_a_proj", "g_b_proj", "b_proj"};

}  // namespace ds
