// What this binary is: the git revision it was built from and the compiler that built it. The
// server reports it in /v1/models and recipe runs record it with every result, so a figure can
// always be traced to the code that produced it.
#pragma once
#include <string>

namespace ds {

struct BuildInfo {
  std::string revision;  // `git describe --always --dirty` of the source tree; "unknown" outside git
  std::string compiler;  // e.g. "gcc 12.2.0"
};

const BuildInfo& build_info();

}  // namespace ds
