// Tests that need something from outside the build (node and the openai npm package, chromium,
// the deltaserve CLI) skip when it is missing on a developer's machine, so a partial set-up can
// still run the rest. Under CI (CI=true, which .ci/run exports) scripts/setup has installed all
// of them and scripts/build has built the CLI, so a missing one means the check silently did
// not happen: there it is a failure. A skipped test would otherwise pass the run.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace ds::test {

inline bool running_in_ci() {
  const char* v = std::getenv("CI");
  return v && (!std::strcmp(v, "true") || !std::strcmp(v, "1"));
}

}  // namespace ds::test

// Skips the test (or fails it under CI) with `what` explaining what is missing. Returns from the
// test body either way.
#define DS_REQUIRE_DEPENDENCY(available, what)                                        \
  do {                                                                              \
    if (!(available)) {                                                             \
      if (::ds::test::running_in_ci())                                              \
        FAIL() << what << " (under CI=true a missing dependency is a failure)";     \
      GTEST_SKIP() << what;                                                         \
    }                                                                               \
  } while (0)
