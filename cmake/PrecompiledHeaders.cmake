# Precompiled headers for the translation units that spend most of their compile parsing the same
# headers (cmake/pch.hpp): sim/, planner/, apps/ and the GoogleTest suites. On CI's two cores the
# two builds of scripts/test.sh (the normal one and the sanitizer one) are most of its time.
#
# GCC uses a precompiled header only where the compile options that shape it match the ones it was
# built with (the -O level, the sanitizers, the macros it reads), so each set of directory-level
# options has an owner of its own: an object library built in that directory, linking what its
# users link, whose precompiled header those users reuse (target_precompile_headers REUSE_FROM).
# -Winvalid-pch says when a unit could not use it (it then parses the headers as before); the
# warning is kept out of -Werror, since it costs time, not correctness.
option(FORESIGHT_PCH "Precompile the headers shared by sim/, planner/, apps/ and the tests" ON)

# foresight_pch_owner(OWNER LIBS... [EXTRA_HEADERS h...]): an owner in the calling directory whose
# precompiled header is cmake/pch.hpp plus EXTRA_HEADERS (system headers, e.g. <gtest/gtest.h>).
# LIBS: the third-party targets whose headers and definitions its users compile with (not the
# project's libraries, which reuse the header: that would be a dependency cycle).
function(foresight_pch_owner owner)
  if(NOT FORESIGHT_PCH)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 _pch "" "" "EXTRA_HEADERS")
  add_library(${owner} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_owner.cpp)
  target_include_directories(${owner} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${owner} PRIVATE ${_pch_UNPARSED_ARGUMENTS})
  set_property(TARGET ${owner} PROPERTY FORESIGHT_PCH_LIBS ${_pch_UNPARSED_ARGUMENTS})
  set(_headers "${PROJECT_SOURCE_DIR}/cmake/pch.hpp")
  foreach(h ${_pch_EXTRA_HEADERS})
    list(APPEND _headers "<${h}>")
  endforeach()
  # The owner and its users are C++ only (no CUDA source reuses it).
  target_precompile_headers(${owner} PRIVATE ${_headers})
  target_compile_options(${owner} PRIVATE -Winvalid-pch -Wno-error=invalid-pch)
endfunction()

# foresight_use_pch(OWNER TARGETS...): the targets compile their C++ with OWNER's header, and with
# the definitions of the third-party targets it was built with (Boost's BOOST_ALL_NO_LIB, which a
# suite of core/ alone would otherwise lack, and GCC refuses a header built with a macro its user
# does not define).
function(foresight_use_pch owner)
  if(NOT FORESIGHT_PCH)
    return()
  endif()
  get_property(_libs TARGET ${owner} PROPERTY FORESIGHT_PCH_LIBS)
  foreach(t ${ARGN})
    target_precompile_headers(${t} REUSE_FROM ${owner})
    target_link_libraries(${t} PRIVATE ${_libs})
    target_compile_options(${t} PRIVATE -Winvalid-pch -Wno-error=invalid-pch)
  endforeach()
endfunction()
