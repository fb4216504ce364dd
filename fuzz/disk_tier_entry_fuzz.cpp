// libFuzzer target: a disk-tier entry file as a restarted server finds it in its folder. Start-up
// indexing and a lookup of every size must treat anything that is not a valid entry as a miss
// (and remove it), never crash or return another entry's bytes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/disk_tier.h"
#include "scratch_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchPath scratch("ds-fuzz-tier");
  const std::string& dir = scratch.path;
  std::filesystem::remove_all(dir);
  {
    ds::DiskTier make(dir, 1 << 20);  // creates the folder as the server would
  }
  const std::string path = dir + "/b-0000000000000001.dst";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  ds::DiskTier t(dir, 1 << 20);
  std::vector<unsigned char> out(size + 64);
  // The sizes a caller may ask for: around the payload the header would imply, and others.
  for (size_t want : {size_t(0), size > 40 ? size - 40 : size_t(1), size, size_t(16)}) {
    if (!t.contains(ds::DiskTier::Kind::Block, 1)) break;
    (void)t.get(ds::DiskTier::Kind::Block, 1, out.data(), std::min(want, out.size()));
  }
  return 0;
}
