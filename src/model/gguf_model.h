// A model given as one GGUF file (`--model FILE.gguf`), and the converter that writes one.
//
// Reading translates the file into what a checkpoint folder holds: config.json's text from the
// architecture's metadata, tokenizer.json's from tokenizer.ggml.* (model/gguf_tokenizer.h), the
// chat template, and the tensors under the Hugging Face names the layers load, undoing what
// llama.cpp's converter did to them (llama's q / k rows are interleaved for its rotary form;
// Kimi-Linear's experts are stacked into one tensor per projection). Float tensors are served
// from the mapping; Q8_0 / Q4_0 / MXFP4 blocks are repacked into codes + scales
// (model/ggml_blocks.h), and a quantized tensor the layers need as numbers (the embedding) is
// dequantized at load. Architectures: "llama" and "kimi-linear".
//
// Writing goes the other way from any DeltaServe checkpoint folder, bf16 or quantized, so
// llama.cpp and DeltaServe can run the very same weights.
#pragma once
#include <cstddef>
#include <string>

#include "model/safetensors.h"

namespace ds {

class GgufFile;

// config.json text for the file's architecture. Throws ds::Error naming the file and key.
std::string gguf_config_json(const GgufFile& g);
// tokenizer.chat_template, or "".
std::string gguf_chat_template(const GgufFile& g);
// The tensors, renamed and repacked. Throws naming the tensor for a name the architecture does
// not have, an unsupported type (which it names), or a shape the metadata contradicts.
WeightStore gguf_weight_store(const std::string& path);

struct GgufExportReport {
  std::string architecture;
  int tensors = 0;
  size_t bytes = 0;  // tensor data written
};
// Writes model_dir (config.json, safetensors, tokenizer.json, tokenizer_config.json) as one GGUF
// v3 file. Throws naming the tensor or setting GGUF cannot carry; never leaves a partial file.
GgufExportReport export_gguf(const std::string& model_dir, const std::string& out_path);

}  // namespace ds
