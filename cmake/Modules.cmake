# One static library per src/ folder (docs/architecture.md). Sources are globbed so a new file
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

# ds_module(NAME PUBLIC deps... PRIVATE deps...): static library ds_<NAME> from src/<NAME>/*.cpp.
#
# Each library sees only the folders it may include (docs/architecture.md, "Layers"): its own,
# and those of the libraries it links. A folder is exposed through a view directory holding one
# link to it (build/include-views/<name>/<name> -> src/<name>), never through src/ itself, so an
# include of a folder the library does not link fails to compile. PUBLIC deps are those the
# library's headers include (their views reach the library's users too); PRIVATE deps are used
# by its sources only, so a user of ds_engine, say, does not see model/ or kernels/.
# scripts/check-layers checks the same table file by file.
function(ds_module name)
  cmake_parse_arguments(M "" "" "PUBLIC;PRIVATE" ${ARGN})
  set(view ${CMAKE_BINARY_DIR}/include-views/${name})
  file(MAKE_DIRECTORY ${view})
  file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${name} ${view}/${name} SYMBOLIC)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cpp)
  if(NOT srcs)  # a folder with headers only
    add_library(ds_${name} INTERFACE)
    target_include_directories(ds_${name} INTERFACE ${view})
    target_link_libraries(ds_${name} INTERFACE ${M_PUBLIC} ${M_PRIVATE})
    return()
  endif()
  ds_isa_flags(${srcs})
  add_library(ds_${name} STATIC ${srcs})
  target_include_directories(ds_${name} PUBLIC ${view})
  target_link_libraries(ds_${name} PUBLIC ${M_PUBLIC} PRIVATE ${M_PRIVATE})
endfunction()
