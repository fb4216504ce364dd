# Script mode (cmake -DSRC=... -DOUT=... -P): writes the source tree's git revision into a header,
# only when it changed, so a build records the revision it was made from without recompiling
# anything else. Run on every build by the ds_build_revision target (src/CMakeLists.txt).
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR rev STREQUAL "")
  set(rev "unknown")
endif()
set(content "#pragma once\n#define DS_BUILD_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
