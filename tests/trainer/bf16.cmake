# Included by tests/trainer/CMakeLists.txt: the bf16 recipe (--precision bf16, trainer/precision.hpp)
# on the tiny model, against the fp32 reference and against its own single-rank run.
#
# Tolerances, from runs on this CPU backend (20 steps, max over steps of |loss - ref| / ref):
#  * bf16 vs fp32. bf16 keeps 8 significant bits (a rounding moves a value by up to 2^-8 = 3.9e-3
#    relative), but the loss is a mean over 128 tokens of a softmax over 256 logits, so the
#    roundings' errors mostly average out: step 1 (forward only) differs by 4.7e-6 (dense) and
#    1.0e-5 (MoE). Training then carries the runs apart: AdamW divides each gradient by its own
#    running RMS, so a rounding that changes a small gradient's sign moves that weight by a whole
#    learning rate. Measured max over 20 steps: 1.17e-4 dense, 3.08e-4 MoE (router decisions flip
#    too). The recipe errors this test is there to catch measured, on the same runs: no fp32
#    master (weights stepped in bf16) 1.02e-3 dense / 1.05e-3 MoE; truncation in place of
#    round-to-nearest-even 1.35e-3 / 1.51e-3. Tolerances: 4e-4 dense, 6e-4 MoE, between the two.
#    (bf16 main gradients in place of fp32 ones measured 1.31e-4: a loss curve of 20 steps cannot
#    tell them apart; the layer test and the element-type checks in the code guard that part.)
#  * bf16 layouts vs the bf16 single rank: the same recipe, but not always the same roundings.
#    - Tensor parallelism rounds each rank's partial sum of a row-parallel GEMM to bf16 before the
#      all-reduce (as Megatron-LM does), so tp layouts differ from step 1 (1e-5 at tp = 2).
#    - Data and pipeline parallelism and TeraPipe slices leave every bf16 rounding where the single
#      rank has it; only the order of fp32 sums changes (main gradients over micro-batches and
#      replicas, the tied embedding's two copies, key/value gradients over slices). Their losses
#      equal the single rank's (to the double-precision loss sum, 1e-12) until such a 2^-24
#      difference in a master weight moves its bf16 working copy across a rounding boundary; that
#      happened at step 5 (MoE ep 2), 6 (TeraPipe), 10 (dp 2) and 12 (pp 2) here, so steps 1-3
#      were checked to 1e-12. Since the bias of the column-parallel GEMMs joins their fp32 sum
#      before the one rounding (Backend::matmul_bias, session 26: the values move, the layouts
#      still round alike) the first flip comes at step 3 for dp 2, TeraPipe, pp 2 with TeraPipe
#      and selective recompute, and MoE ep 2 (3.5e-6, 2.1e-8, 2.1e-8, 9.8e-7 there; steps 1 and 2
#      equal to 1e-16), and later than step 3 for pp 2 and pp 2 with virtual stages: those four
#      are checked over steps 1-2, these two over 1-3. Recompute and offload change no order at
#      all: bit-identical.
#    - After that first flip the runs drift apart like bf16 and fp32 do, by the same mechanism:
#      measured max 3.2e-5 dense (tp2_pp2_dp2_zero1; 4.8e-5 at tp 4 with sp), 2.0e-4 MoE
#      (moe_tp2_sp). Tolerances 1e-4 dense, 4e-4 MoE: the ZeRO-1 layout gathering its master
#      values through a bf16 tensor (master weights silently rounded) measured 9.8e-4.
set(_bf16 --precision bf16)

# The single-rank bf16 references (no mpirun), their own checkpoint directories so that they run
# beside the fp32 runs.
foreach(ref reference moe_reference)
  add_test(NAME trainer_run_bf16_${ref}
           COMMAND ${_train} --plan ${_runs}/${ref}.json --summary ${_runs}/bf16_${ref}.summary.json
                   --checkpoint-dir ${_runs}/ck_bf16_${ref} ${_bf16} ${_common})
  set_tests_properties(trainer_run_bf16_${ref} PROPERTIES FIXTURES_SETUP run_bf16_${ref} ENVIRONMENT "${_mpi_env}" TIMEOUT 60)
endforeach()
# (Peak memory is not compared: the tiny model's weights outweigh its activations, and the recipe
# holds 18 bytes per parameter against fp32's 16: params_test checks that count.)
add_test(NAME trainer_bf16_vs_fp32_reference
         COMMAND ${_compare} ${_runs}/reference.summary.json ${_runs}/bf16_reference.summary.json --rel 4e-4
                 --expect-steps 20)
add_test(NAME trainer_bf16_vs_fp32_moe_reference
         COMMAND ${_compare} ${_runs}/moe_reference.summary.json ${_runs}/bf16_moe_reference.summary.json --rel 6e-4
                 --expect-steps 20)
# The recipe is really on: the bf16 curve is not the fp32 one (measured 1.17e-4 at most, 4.7e-6 at
# step 1; fp32 layouts agree with each other within 3e-9).
add_test(NAME trainer_bf16_differs_from_fp32
         COMMAND ${_compare} ${_runs}/reference.summary.json ${_runs}/bf16_reference.summary.json --expect-differ 2e-5)
add_test(NAME trainer_bf16_loss_goes_down
         COMMAND ${_compare} ${_runs}/bf16_reference.summary.json ${_runs}/bf16_reference.summary.json --rel 0
                 --expect-decrease 0.4)
set_tests_properties(trainer_bf16_vs_fp32_reference trainer_bf16_differs_from_fp32 trainer_bf16_loss_goes_down
                     PROPERTIES FIXTURES_REQUIRED "run_reference;run_bf16_reference")
set_tests_properties(trainer_bf16_vs_fp32_moe_reference PROPERTIES FIXTURES_REQUIRED "run_moe_reference;run_bf16_moe_reference")

# A recipe the trainer does not know: exit 2 naming the option. (The cuda backends run bf16 too:
# backend_select_test checks what make_backend answers with and without a GPU.)
add_test(NAME trainer_error_bad_precision
         COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${_train}|--plan|${_runs}/reference.json|--precision|fp16|--quiet"
                 -DEXPECT_RC=2 "-DEXPECT_REGEX=--precision = fp16: must be one of fp32 [|] bf16"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
set_tests_properties(trainer_error_bad_precision PROPERTIES ENVIRONMENT "${_mpi_env}")

if(FORESIGHT_HAVE_MPI)
  # name | tolerance over 20 steps | steps that must equal the single rank's to 1e-12 (0: none)
  set(_bf16_layouts
    "selective 0 20"
    "offload 0 20"
    "tp2 1e-4 0"
    "pp2 1e-4 3"
    "dp2 1e-4 2"
    "tp2_pp2_dp2_zero1 1e-4 0"
    "pp2_vs2 1e-4 3"
    "tp2_sp 1e-4 0"
    "tp2_pp2_dp2_sp_zero1 1e-4 0"
    "terapipe 1e-4 2"
    "pp2_terapipe_selective 1e-4 2"
    "moe_dp2_ep2 4e-4 2"
    "moe_tp2_sp 4e-4 0")
  # Under the sanitizers one multi-rank bf16 layout runs (sequence parallelism's bf16
  # reduce-scatter and all-gather, two ranks) beside the single-rank ones.
  set(_bf16_sanitize_layouts selective offload terapipe tp2_sp)
  foreach(entry ${_bf16_layouts})
    string(REPLACE " " ";" f "${entry}")
    list(GET f 0 name)
    list(GET f 1 rel)
    list(GET f 2 exact)
    get_property(_n GLOBAL PROPERTY FORESIGHT_TRAINER_PLAN_GPUS_${name})
    set(ref bf16_reference)
    if(name MATCHES "moe")
      set(ref bf16_moe_reference)
    endif()
    trainer_launch(launch ${_n})
    add_test(NAME trainer_run_bf16_${name}
             COMMAND ${launch} ${_train} --plan ${_runs}/${name}.json --summary ${_runs}/bf16_${name}.summary.json
                     --checkpoint-dir ${_runs}/ck_bf16_${name} ${_bf16} ${_common})
    set_tests_properties(trainer_run_bf16_${name} PROPERTIES FIXTURES_SETUP run_bf16_${name} ENVIRONMENT "${_mpi_env}"
                         PROCESSORS ${_n} TIMEOUT 120)
    add_test(NAME trainer_bf16_losses_${name}
             COMMAND ${_compare} ${_runs}/${ref}.summary.json ${_runs}/bf16_${name}.summary.json --rel ${rel} --expect-steps 20)
    set(_checks trainer_bf16_losses_${name})
    if(exact GREATER 0 AND exact LESS 20)
      add_test(NAME trainer_bf16_first_steps_${name}
               COMMAND ${_compare} ${_runs}/${ref}.summary.json ${_runs}/bf16_${name}.summary.json --rel 1e-12
                       --first-steps ${exact} --expect-steps ${exact})
      list(APPEND _checks trainer_bf16_first_steps_${name})
    endif()
    set_tests_properties(${_checks} PROPERTIES FIXTURES_REQUIRED "run_${ref};run_bf16_${name}")
    if(NOT name IN_LIST _bf16_sanitize_layouts)
      set_tests_properties(trainer_run_bf16_${name} ${_checks} PROPERTIES LABELS sanitizer-skip)
    endif()
  endforeach()

  # The host-staging communicator the CUDA backend sends through (--backend cpu-staged): bf16
  # tensors are staged as host bf16 tensors, whose reductions the MPI communicator sums and rounds
  # once, the same arithmetic as the direct path, so the losses are bit-identical (TP and SP collectives, pipeline messages, ZeRO-1 gather, DP buckets).
  trainer_launch(launch8 8)
  add_test(NAME trainer_run_bf16_staged_tp2_pp2_dp2_sp_zero1
           COMMAND ${launch8} ${_train} --plan ${_runs}/tp2_pp2_dp2_sp_zero1.json --backend cpu-staged
                   --summary ${_runs}/bf16_staged_tp2_pp2_dp2_sp_zero1.summary.json
                   --checkpoint-dir ${_runs}/ck_bf16_staged ${_bf16} ${_common})
  set_tests_properties(trainer_run_bf16_staged_tp2_pp2_dp2_sp_zero1 PROPERTIES FIXTURES_SETUP run_bf16_staged
                       ENVIRONMENT "${_mpi_env}" PROCESSORS 8 TIMEOUT 120 LABELS sanitizer-skip)
  add_test(NAME trainer_bf16_losses_staged_tp2_pp2_dp2_sp_zero1
           COMMAND ${_compare} ${_runs}/bf16_tp2_pp2_dp2_sp_zero1.summary.json
                   ${_runs}/bf16_staged_tp2_pp2_dp2_sp_zero1.summary.json --rel 0 --expect-steps 20)
  set_tests_properties(trainer_bf16_losses_staged_tp2_pp2_dp2_sp_zero1 PROPERTIES
                       FIXTURES_REQUIRED "run_bf16_staged;run_bf16_tp2_pp2_dp2_sp_zero1" LABELS sanitizer-skip)

  # The NCCL communicator over its MPI stand-in (--comm nccl): its reductions sum the same floats
  # with MPI and round a bf16 result once, as the MPI communicator does, so the losses are the
  # bf16 MPI run's exactly.
  add_test(NAME trainer_run_bf16_nccl_tp2_pp2_dp2_sp_zero1
           COMMAND ${launch8} ${_train} --plan ${_runs}/tp2_pp2_dp2_sp_zero1.json --comm nccl
                   --summary ${_runs}/bf16_nccl_tp2_pp2_dp2_sp_zero1.summary.json
                   --checkpoint-dir ${_runs}/ck_bf16_nccl ${_bf16} ${_common})
  set_tests_properties(trainer_run_bf16_nccl_tp2_pp2_dp2_sp_zero1 PROPERTIES FIXTURES_SETUP run_bf16_nccl
                       ENVIRONMENT "${_mpi_env}" PROCESSORS 8 TIMEOUT 120 LABELS sanitizer-skip)
  add_test(NAME trainer_bf16_losses_nccl_tp2_pp2_dp2_sp_zero1
           COMMAND ${_compare} ${_runs}/bf16_tp2_pp2_dp2_sp_zero1.summary.json
                   ${_runs}/bf16_nccl_tp2_pp2_dp2_sp_zero1.summary.json --rel 0 --expect-steps 20
                   --expect-comm nccl-standin)
  set_tests_properties(trainer_bf16_losses_nccl_tp2_pp2_dp2_sp_zero1 PROPERTIES
                       FIXTURES_REQUIRED "run_bf16_nccl;run_bf16_tp2_pp2_dp2_sp_zero1" LABELS sanitizer-skip)

  # Offloaded bf16 activations move 2 bytes an element, their fp32 LayerNorm statistics 4 (the
  # count of the fp32 offload test above, per layer and micro-batch): x, a, attn, x1, c 5*512, qkv
  # 1536, probs 1024, fc1, gelu 4096: 9216 bf16 elements = 18432 B; four (N,1) statistics 64 fp32 =
  # 256 B; 18688 B * 2 directions * 4 layers * 8 micro-batches = 1196032 B = 1.140625 MiB; and less
  # peak memory than the bf16 run without offload (whose losses it equals bit for bit).
  add_test(NAME trainer_bf16_offload_bytes
           COMMAND ${_compare} ${_runs}/bf16_reference.summary.json ${_runs}/bf16_offload.summary.json --rel 0
                   --expect-offload-MiB 1.140625 --expect-less-memory)
  set_tests_properties(trainer_bf16_offload_bytes PROPERTIES FIXTURES_REQUIRED "run_bf16_reference;run_bf16_offload")

  # Stop/resume under bf16 (ZeRO-1, TP, PP, DP): the checkpoint holds the fp32 master values and the
  # bf16 working copy is rebuilt from them, so steps 11-20 equal the uninterrupted run's bit for bit.
  add_test(NAME trainer_bf16_resume_clean COMMAND ${CMAKE_COMMAND} -E rm -rf ${_runs}/ck_bf16_resume)
  set_tests_properties(trainer_bf16_resume_clean PROPERTIES FIXTURES_SETUP bf16_resume_clean)
  add_test(NAME trainer_run_bf16_resume_first_half
           COMMAND ${launch8} ${_train} --plan ${_runs}/tp2_pp2_dp2_zero1.json --stop-after 10
                   --checkpoint-dir ${_runs}/ck_bf16_resume --summary ${_runs}/bf16_resume_a.summary.json ${_bf16} ${_common})
  set_tests_properties(trainer_run_bf16_resume_first_half PROPERTIES FIXTURES_REQUIRED bf16_resume_clean
                       FIXTURES_SETUP bf16_resume_half ENVIRONMENT "${_mpi_env}" PROCESSORS 8 TIMEOUT 120)
  add_test(NAME trainer_run_bf16_resume_second_half
           COMMAND ${launch8} ${_train} --plan ${_runs}/tp2_pp2_dp2_zero1.json --resume
                   --checkpoint-dir ${_runs}/ck_bf16_resume --summary ${_runs}/bf16_resume_b.summary.json ${_bf16} ${_common})
  set_tests_properties(trainer_run_bf16_resume_second_half PROPERTIES FIXTURES_REQUIRED bf16_resume_half
                       FIXTURES_SETUP bf16_resume_done ENVIRONMENT "${_mpi_env}" PROCESSORS 8 TIMEOUT 120)
  add_test(NAME trainer_bf16_resume_matches_uninterrupted
           COMMAND ${_compare} ${_runs}/bf16_tp2_pp2_dp2_zero1.summary.json ${_runs}/bf16_resume_b.summary.json --rel 0
                   --expect-steps 10)
  set_tests_properties(trainer_bf16_resume_matches_uninterrupted PROPERTIES
                       FIXTURES_REQUIRED "bf16_resume_done;run_bf16_tp2_pp2_dp2_zero1")
  set_tests_properties(trainer_bf16_resume_clean trainer_run_bf16_resume_first_half trainer_run_bf16_resume_second_half
                       trainer_bf16_resume_matches_uninterrupted PROPERTIES LABELS sanitizer-skip)
endif()
