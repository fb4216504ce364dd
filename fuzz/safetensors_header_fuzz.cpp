// libFuzzer target: a safetensors file (8-byte length, JSON header, data) as weight loading maps
// it. Every input must open or be refused with ds::Error; an opened file's tensor views must lie
// inside the mapping (touching every byte lets ASan check that).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchPath scratch("ds-fuzz-safetensors");
  const std::string& path = scratch.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const ds::SafetensorsFile st = ds::SafetensorsFile::open(path);
    unsigned sum = 0;
    for (const auto& t : st.tensors())
      for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(static_cast<const unsigned char*>(t.data)[i]);
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const ds::Error&) {
  }
  return 0;
}
