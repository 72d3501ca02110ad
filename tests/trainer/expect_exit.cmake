# Runs COMMAND (a list joined with "|"), and checks its exit code (EXPECT_RC) and that its output
# matches EXPECT_REGEX. For the error paths of foresight-train, whose exit code matters.
string(REPLACE "|" ";" _cmd "${COMMAND}")
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(NOT "${_rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "exit code ${_rc}, expected ${EXPECT_RC}")
endif()
if(NOT "${_out}${_err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match: ${EXPECT_REGEX}")
endif()
