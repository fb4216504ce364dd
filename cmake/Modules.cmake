# One static library per src/ folder (DESIGN.md section 1). Sources are globbed so a new file
# needs no CMake edit. Files named *_avx512.cpp / *_avx2.cpp are compiled for that ISA only;
# the rest of the code picks between them at run time (src/core/cpu_features.h).
set(DS_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mfma -mf16c -mbmi2)
set(DS_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2)

function(ds_isa_flags)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DS_AVX512_FLAGS}")
    elseif(src MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DS_AVX2_FLAGS}")
    endif()
  endforeach()
endfunction()

# ds_module(NAME folder DEPS ...): static library ds_<folder> from src/<folder>/*.cpp
function(ds_module name)
  cmake_parse_arguments(M "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cpp)
  if(NOT srcs)  # a folder with headers only (or not started yet)
    add_library(ds_${name} INTERFACE)
    target_include_directories(ds_${name} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(ds_${name} INTERFACE ${M_DEPS})
    return()
  endif()
  ds_isa_flags(${srcs})
  add_library(ds_${name} STATIC ${srcs})
  target_include_directories(ds_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(ds_${name} PUBLIC ${M_DEPS})
endfunction()
