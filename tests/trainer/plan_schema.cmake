# The planner and the trainer share one plan.json schema: runs the real `foresight plan` on a tiny
# model (MODEL_YAML) for GPUS ranks, then foresight-train on the plan.json it wrote (STEPS steps).
# The trainer must either run it (exit 0) or refuse it with exit 2 naming a plan or model field
# it does not run yet; a parse error, any other exit or a crash fails the test.
# With -DFRAMEWORK=foresight-train the plan is searched for the trainer itself, and the trainer must
# run it: the planner offers only what the trainer's FrameworkTraits entry allows.
#   cmake -DFORESIGHT=... -DTRAIN=... -DMODEL_YAML=... -DCLUSTER=... -DGPUS=... -DOUT=... [-DMPIRUN=a|b|c]
#         [-DFRAMEWORK=name] [-DPICK=n] -P plan_schema.cmake
file(REMOVE_RECURSE ${OUT})
set(framework_args "")
if(FRAMEWORK)
  set(framework_args --framework ${FRAMEWORK})
endif()
if(NOT PICK)
  set(PICK 1)
endif()
execute_process(COMMAND ${FORESIGHT} plan --model ${MODEL_YAML} --cluster ${CLUSTER} --gpus ${GPUS} --global-batch 8
                        --no-simgrid --top 3 --out ${OUT} --pick ${PICK} ${framework_args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "foresight plan exited ${rc}:\n${out}${err}")
endif()
file(READ ${OUT}/plan.json plan)
string(JSON gpus GET "${plan}" gpus)
string(JSON schedule GET "${plan}" plan schedule)
message("foresight plan wrote ${OUT}/plan.json: gpus ${gpus}, schedule ${schedule}")
set(launch "")
if(gpus GREATER 1)
  string(REPLACE "|" ";" launch "${MPIRUN}")
  list(APPEND launch ${gpus} --oversubscribe)
endif()
execute_process(COMMAND ${launch} ${TRAIN} --plan ${OUT}/plan.json --steps 2 --quiet --checkpoint-dir ${OUT}/ck
                        --summary ${OUT}/summary.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("foresight-train exited ${rc}:\n${out}${err}")
if(rc EQUAL 0)
  file(READ ${OUT}/summary.json summary)
  string(JSON status GET "${summary}" status)
  string(JSON steps LENGTH "${summary}" steps)
  if(NOT status STREQUAL "ok" OR NOT steps EQUAL 2)
    message(FATAL_ERROR "summary: status ${status}, ${steps} steps (expected ok, 2)")
  endif()
  message("ran the plan: status ok, 2 steps")
elseif(rc EQUAL 2 AND FRAMEWORK STREQUAL "foresight-train")
  message(FATAL_ERROR "the trainer refused a plan searched for it (--framework foresight-train)")
elseif(rc EQUAL 2)
  if(NOT "${out}${err}" MATCHES "(plan|model)\\.[a-z_.]+( = [^:]*)?: [^\n]*foresight-train")
    message(FATAL_ERROR "exit 2 without naming an unsupported plan or model field")
  endif()
  message("refused with exit 2, naming an unsupported field")
else()
  message(FATAL_ERROR "foresight-train exited ${rc}")
endif()
