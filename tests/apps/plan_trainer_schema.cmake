# One plan.json schema on both sides: `foresight plan --out` writes a plan for a tiny model and
# `foresight-train` reads and runs it (two steps). Run with:
#   cmake -DFORESIGHT=... -DTRAIN=... -DWORK=... -P plan_trainer_schema.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/tiny.yaml "model: {name: tiny, layers: 4, hidden: 64, heads: 4, seq_len: 32, vocab: 256}\n")
execute_process(
  COMMAND ${FORESIGHT} plan --model ${WORK}/tiny.yaml --cluster selene --gpus 1 --global-batch 4
          --framework generic --no-simgrid --top 3 --out ${WORK}/out
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "foresight plan failed (${rc}): ${out}${err}")
endif()
execute_process(
  COMMAND ${TRAIN} --plan ${WORK}/out/plan.json --steps 2 --checkpoint-dir ${WORK}/ck --summary ${WORK}/summary.json --quiet
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 2)
  # The trainer may refuse a feature it cannot run yet, but only by naming a plan field.
  if(NOT err MATCHES "plan\\.")
    message(FATAL_ERROR "foresight-train refused the planner's plan without naming a field: ${err}")
  endif()
  message(STATUS "foresight-train refused a feature by name: ${err}")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "foresight-train failed on the planner's plan.json (${rc}): ${out}${err}")
else()
  file(READ ${WORK}/summary.json summary)
  string(JSON steps LENGTH "${summary}" steps)
  if(NOT steps EQUAL 2)
    message(FATAL_ERROR "expected 2 steps in the trainer's summary, got ${steps}: ${summary}")
  endif()
  # The plan's prediction travelled with it and the trainer put it beside the measurement.
  string(JSON engine GET "${summary}" predicted_vs_measured engine)
  string(JSON predicted GET "${summary}" predicted_vs_measured iteration_s predicted)
  if(NOT predicted GREATER 0)
    message(FATAL_ERROR "no predicted iteration time in the trainer's summary: ${summary}")
  endif()
  if(NOT engine STREQUAL "analytic")
    message(FATAL_ERROR "the planner's prediction did not reach the trainer's summary: ${summary}")
  endif()
endif()
