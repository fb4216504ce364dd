// libFuzzer target: a GGUF file as `--model FILE.gguf` maps it. Every input must open or be
// refused with ds::Error; an opened file's tensors must lie inside the mapping (touching every
// byte lets ASan check that), and translating it into a model's config, tokenizer and weights
// must also either work or throw ds::Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_tokenizer.h"
#include "core/error.h"
#include "model/gguf_model.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchPath scratch("ds-fuzz-gguf");
  const std::string& path = scratch.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const ds::GgufFile g = ds::GgufFile::open(path);
    unsigned sum = 0;
    for (const auto& t : g.tensors())
      for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(static_cast<unsigned char>(t.data[i]));
    volatile unsigned sink = sum;
    (void)sink;
    try {
      (void)ds::gguf_config_json(g);
      (void)ds::gguf_tokenizer_json(g);
      const ds::WeightStore s = ds::gguf_weight_store(path);
      (void)s.size();
    } catch (const ds::Error&) {
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
