#include "core/build_info.h"

#include "build_revision.h"

namespace ds {

const BuildInfo& build_info() {
  static const BuildInfo info{
      DS_BUILD_REVISION,
#if defined(__clang__)
      "clang " __clang_version__,
#elif defined(__GNUC__)
      "gcc " __VERSION__,
#else
      "unknown",
#endif
  };
  return info;
}

}  // namespace ds
