// `deltaserve export-gguf`: any DeltaServe checkpoint folder, bf16 or quantized, as one GGUF v3
// file, so llama.cpp and DeltaServe can run the very same weights. The way back is reading the
// file as a model (model/gguf_model.h); the architecture's metadata keys (model/gguf_arch.h),
// tensor names and what the conversion does to each (model/gguf_names.h, gguf_transforms.h) are
// shared with it.
#pragma once
#include <cstddef>
#include <string>

namespace ds {

struct GgufExportReport {
  std::string architecture;
  int tensors = 0;
  size_t bytes = 0;  // tensor data written
};
// Writes model_dir (config.json, safetensors, tokenizer.json, tokenizer_config.json) as one GGUF
// v3 file. Throws naming the tensor or setting GGUF cannot carry; never leaves a partial file.
GgufExportReport export_gguf(const std::string& model_dir, const std::string& out_path);

}  // namespace ds
