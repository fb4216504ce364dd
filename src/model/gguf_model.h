// A model given as one GGUF file (`--model FILE.gguf`); convert/gguf_export.h writes one.
//
// Reading translates the file into what a checkpoint folder holds: config.json's text from the
// architecture's metadata, tokenizer.json's from tokenizer.ggml.* (checkpoint/gguf_tokenizer.h), the
// chat template, and the tensors under the Hugging Face names the layers load, undoing what
// llama.cpp's converter did to them (llama's q / k rows are interleaved for its rotary form;
// Kimi-Linear's experts are stacked into one tensor per projection). Float tensors are served
// from the mapping; Q8_0 / Q4_0 / MXFP4 blocks are repacked into codes + scales
// (checkpoint/ggml_blocks.h), and a quantized tensor the layers need as numbers (the embedding) is
// dequantized at load. Architectures: "llama" and "kimi-linear".
#pragma once
#include <cstddef>
#include <string>

#include "checkpoint/safetensors.h"

namespace ds {

class GgufFile;

// config.json text for the file's architecture. Throws ds::Error naming the file and key.
std::string gguf_config_json(const GgufFile& g);
// tokenizer.chat_template, or "".
std::string gguf_chat_template(const GgufFile& g);
// The tensors, renamed and repacked. Throws naming the tensor for a name the architecture does
// not have, an unsupported type (which it names), or a shape the metadata contradicts.
WeightStore gguf_weight_store(const std::string& path);

}  // namespace ds
