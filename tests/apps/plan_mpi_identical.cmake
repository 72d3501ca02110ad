# `mpirun -np 2 foresight plan --json` prints exactly what one process prints (the SimGrid
# re-ranking of the top plans included), byte for byte.
#   cmake -DFORESIGHT=... -DMPIRUN="a|b|c" -DOUT=... -P plan_mpi_identical.cmake
set(args plan --experiment sc21-table1-1.7b --top 4 --json)
execute_process(COMMAND ${FORESIGHT} ${args} RESULT_VARIABLE rc1 OUTPUT_FILE ${OUT}.one ERROR_VARIABLE err1)
string(REPLACE "|" ";" launch "${MPIRUN}")
execute_process(COMMAND ${launch} 2 --oversubscribe ${FORESIGHT} ${args} RESULT_VARIABLE rc2 OUTPUT_FILE ${OUT}.two
                ERROR_VARIABLE err2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "exit ${rc1} / ${rc2}:\n${err1}\n${err2}")
endif()
file(READ ${OUT}.one one)
file(READ ${OUT}.two two)
if(NOT one STREQUAL two)
  message(FATAL_ERROR "the two-rank output differs from one process's:\n--- one\n${one}\n--- two\n${two}")
endif()
string(LENGTH "${one}" n)
message("identical, ${n} bytes")
