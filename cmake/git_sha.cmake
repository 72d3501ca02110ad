# Writes OUT, a header naming the source tree's commit (with "-dirty" when tracked files differ
# from it), at every build, and touches it only when the text changes, so that a build names the
# commit it was built from even when CMake does not reconfigure.
#   cmake -DSRC=<source dir> -DOUT=<header> -P git_sha.cmake
execute_process(COMMAND git -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE sha
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR sha STREQUAL "")
  set(sha "unknown")
else()
  execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no OUTPUT_VARIABLE dirty
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(sha "${sha}-dirty")
  endif()
endif()
set(text "// Generated at build time by cmake/git_sha.cmake: the commit this build was made from.
#pragma once
namespace foresight::config {
inline constexpr const char* kGitSha = \"${sha}\";
}  // namespace foresight::config
")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
