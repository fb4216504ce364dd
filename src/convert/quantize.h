// `deltaserve quantize`: a checkpoint's linear weights to a block format (kernels/quant_formats.h),
// written as a DeltaServe checkpoint that `serve` and `generate` load like any other.
//
// Quantized: every 2-D "*.weight" whose input size is a multiple of 32, except what stays as it
// was (--keep, and kQuantizeKeptByDefault: model/unquantized_tensors.h says which and why).
// Everything else in the folder (config, tokenizer, chat template) is copied. The file's metadata records the format
// ("deltaserve.quantization") and the source tensors' names.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/quant_formats.h"
#include "model/unquantized_tensors.h"

namespace ds {

struct QuantizeOptions {
  QuantFormat format = QuantFormat::Q8_0;
  std::vector<std::string> keep;  // more name fragments to keep unquantized
};

struct QuantizeReport {
  int quantized = 0, kept = 0;
  size_t bytes_before = 0, bytes_after = 0;  // tensor data in the checkpoint
};

// Throws ds::Error naming the folder or tensor at fault; never writes a partial output file.
QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o);

}  // namespace ds
