#include "core/plan_json.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <sstream>

#include "core/framework.hpp"
#include "core/json_reader.hpp"
#include "core/plan.hpp"
#include "core/spec_fields.hpp"
#include "core/spec_json.hpp"

namespace foresight {

nlohmann::ordered_json to_json(const ExecutablePlan& p) {
  nlohmann::ordered_json j;
  j["schema_version"] = kPlanJsonSchemaVersion;
  j["model"] = to_json(p.model);
  j["cluster"] = {{"name", p.cluster}, {"gpus_per_node", p.gpus_per_node}};
  j["training"] = to_json(p.training);
  j["plan"] = to_json(p.plan);
  j["gpus"] = p.gpus;
  j["data"] = p.data;
  j["steps"] = p.steps;
  j["checkpoint_dir"] = p.checkpoint_dir;
  if (p.prediction)
    j["prediction"] = {{"iteration_s", p.prediction->iteration_s},
                       {"tokens_per_s", p.prediction->tokens_per_s},
                       {"tflops_per_gpu", p.prediction->tflops_per_gpu},
                       {"memory_GB", p.prediction->memory_GB},
                       {"engine", p.prediction->engine}};
  return j;
}

ExecutablePlan parse_plan_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw SpecError(SourceLocation{source, 0, 0}, "", "", std::string("is not valid JSON: ") + e.what());
  }
  JsonReader top(j, source, "");
  ExecutablePlan p;
  const int version = top.integer("schema_version", std::nullopt, 1);
  if (version != kPlanJsonSchemaVersion)
    top.fail("schema_version", std::to_string(version), "must be " + std::to_string(kPlanJsonSchemaVersion));
  {
    JsonReader m(top.get("model", true), source, "model");
    JsonFieldReader fields(m);
    visit_fields(fields, p.model);
    m.finish();
    if (auto v = complete_model(p.model)) m.fail(v->field, v->value, v->rule);
  }
  {
    JsonReader c(top.get("cluster", true), source, "cluster");
    p.cluster = c.string("name", std::nullopt);
    p.gpus_per_node = c.integer("gpus_per_node", std::nullopt, 1);
    c.finish();
  }
  {
    JsonReader t(top.get("training", true), source, "training");
    JsonFieldReader fields(t);
    visit_fields(fields, p.training);
    t.finish();
  }
  {
    JsonReader q(top.get("plan", true), source, "plan");
    JsonFieldReader fields(q);
    visit_fields(fields, p.plan);
    q.finish();
  }
  p.gpus = top.integer("gpus", std::nullopt, 1);
  if (p.gpus > kMaxClusterGpus) top.fail("gpus", std::to_string(p.gpus), "must be at most " + std::to_string(kMaxClusterGpus));
  if (p.gpus_per_node > kMaxClusterGpus)
    top.fail("cluster.gpus_per_node", std::to_string(p.gpus_per_node), "must be at most " + std::to_string(kMaxClusterGpus));
  p.data = top.string("data", "synthetic");
  p.steps = top.integer("steps", 20, 1);
  p.checkpoint_dir = top.string("checkpoint_dir", "checkpoints");
  if (!top.get("prediction", false).is_null()) {
    JsonReader pr(top.get("prediction", false), source, "prediction");
    PlanPrediction x;
    x.iteration_s = pr.number("iteration_s", std::nullopt, 0.0);
    x.tokens_per_s = pr.number("tokens_per_s", 0.0, 0.0);
    x.tflops_per_gpu = pr.number("tflops_per_gpu", 0.0, 0.0);
    x.memory_GB = pr.number("memory_GB", 0.0, 0.0);
    x.engine = pr.string("engine", "");
    pr.finish();
    p.prediction = x;
  }
  top.finish();
  // The same plan rules as scenario files; the cluster here is only what the trainer needs.
  ClusterSpec c;
  c.nodes = (p.gpus + p.gpus_per_node - 1) / p.gpus_per_node;
  c.gpus_per_node = p.gpus_per_node;
  c.gpu.peak_fp32 = c.gpu.peak_tf32 = c.gpu.peak_fp16 = c.gpu.peak_bf16 = c.gpu.peak_fp8 = FlopsPerSecond(1);  // not checked here
  c.host.memory_bandwidth = BytesPerSecond(1);  // nor this (the simulator's need for an offloaded optimizer)
  if (auto v = check_plan(p.model, c, p.training, p.plan, p.gpus))
    throw SpecError(SourceLocation{source, 0, 0}, v->field, v->value, v->rule);
  return p;
}

std::string gpu_train_flags(const ExecutablePlan& p) {
  // A plan for a GPU cluster runs on the CUDA backend, with NCCL between the ranks, in Megatron-LM's
  // bf16 recipe (fp32 master weights and gradient accumulation) unless the plan trains in fp32:
  // the trainer's own default is the fp32 CPU reference. A tf32 plan keeps fp32 storage with TF32
  // tensor-core GEMMs: the cuda-tf32 backend.
  const bool fp32 = p.training.dtype == Dtype::fp32 || p.training.dtype == Dtype::tf32;
  return std::string("--backend ") + (p.training.dtype == Dtype::tf32 ? "cuda-tf32" : "cuda") + " --precision " +
         (fp32 ? "fp32" : "bf16");
}

std::string launch_script(const ExecutablePlan& p, const std::string& plan_path) {
  std::ostringstream s;
  const int nodes = (p.gpus + p.gpus_per_node - 1) / p.gpus_per_node;
  const std::string train = "foresight-train --plan \"$PLAN\" " + gpu_train_flags(p);
  s << "#!/usr/bin/env bash\n"
    << "# Launch lines for " << plan_path << ": " << p.gpus << " ranks, one per GPU, " << p.gpus_per_node
    << " per node on " << nodes << " node(s); the CUDA backend, NCCL bootstrapped over MPI.\n"
    << "# What of foresight-train's GPU path has run on real GPUs so far: trainer/README.md.\n";
  if (p.training.dtype == Dtype::fp16 || p.training.dtype == Dtype::fp8)
    s << "# The plan trains in " << to_string(p.training.dtype)
      << "; foresight-train has no " << to_string(p.training.dtype)
      << " recipe and runs bf16, whose step time the prediction does not describe.\n";
  s << "set -euo pipefail\n"
    << "PLAN=\"${PLAN:-" << plan_path << "}\"\n"
    << "if [ -n \"${SLURM_JOB_ID:-}\" ]; then\n"
    << "  exec srun --nodes=" << nodes << " --ntasks=" << p.gpus << " --ntasks-per-node=" << p.gpus_per_node
    << " --gpus-per-task=1 " << train << "\n"
    << "else\n"
    << "  exec mpirun -np " << p.gpus << " --map-by ppr:" << p.gpus_per_node << ":node --bind-to none " << train << "\n"
    << "fi\n";
  return s.str();
}

std::string megatron_arguments(const ExecutablePlan& p, std::string* why_not) {
  const PlanSpec& q = p.plan;
  // No equivalent: the arguments are empty and why_not (where asked) says what has no flag.
  auto none = [why_not](const std::string& why) {
    if (why_not) *why_not = why;
    return std::string();
  };
  if (q.schedule == Schedule::terapipe) return none("TeraPipe's token-level pipeline has no Megatron-LM flag");
  if (q.schedule == Schedule::gpipe) return none("Megatron-LM runs no GPipe schedule (1f1b or interleaved)");
  // Zero-bubble and DualPipe schedules have no Megatron-LM flag (sail-sg's fork and DeepSeek's
  // DualPipe run them).
  if (q.schedule == Schedule::zb_h1 || q.schedule == Schedule::dualpipe)
    return none(std::string("the ") + to_string(q.schedule) + " schedule has no Megatron-LM flag");
  // ZeRO-2/3 in Megatron-Core is Megatron-FSDP (--use-megatron-fsdp, written below); no other
  // framework's sharding (DeepSpeed's, PyTorch FSDP's, HSDP groups) has Megatron-LM flags.
  const Launcher dialect = framework_traits(q.framework).launcher;
  const bool deepspeed = dialect == Launcher::megatron_deepspeed;
  const bool fsdp = q.zero >= 2 && dialect == Launcher::megatron_core;
  // Megatron-Core shards its distributed optimizer (or Megatron-FSDP) within groups and replicates
  // it across them (--num-distributed-optimizer-instances, core_v0.10+); nothing else of
  // plan.shard_group has a flag.
  const bool hybrid = q.shard_group > 0 && q.shard_group != q.grad_ranks();
  const bool optimizer_instances = hybrid && q.zero >= 1 && dialect == Launcher::megatron_core;
  if (hybrid && !optimizer_instances)
    return none("hybrid sharding (plan.shard_group) has no Megatron-LM flag but Megatron-Core's distributed optimizer "
                "instances (plan.framework megatron-core, plan.zero 1 to 3)");
  // DeepSpeed's ZeRO is its configuration's (ds_config.json, zero_optimization.stage), which
  // Megatron-DeepSpeed reads with --deepspeed_config.
  if (q.zero >= 2 && !fsdp && !deepspeed)
    return none("ZeRO-" + std::to_string(q.zero) + " as " + to_string(q.framework) +
                " runs it has no Megatron-LM flags (Megatron-Core's is Megatron-FSDP: plan.framework megatron-core)");
  // Micro-batch-level recompute has no Megatron-LM flag (NeMo's
  // num_micro_batches_with_partial_activation_checkpoints drives Megatron-Core's schedule).
  if (q.partial_recompute_microbatches > 0)
    return none("micro-batch-level recompute (plan.partial_recompute_microbatches) has no Megatron-LM flag");
  // Per-op selective checkpointing and torch.compile are torchtitan's / PyTorch's, not Megatron-LM's.
  if (q.recompute == Recompute::selective_op) return none("per-op selective checkpointing is torchtitan's, not Megatron-LM's");
  if (q.compile) return none("torch.compile (plan.compile) has no Megatron-LM flag");
  // Megatron-Core's activation offload is TransformerConfig.cpu_offloading, which NeMo sets and
  // megatron/training/arguments.py exposes from core_v0.16.0 on (--cpu-offloading-num-layers N,
  // one of the TransformerConfig fields ArgumentGroupFactory turns into flags; N > 0 turns
  // cpu_offloading on). Megatron-LM 2021-22 has none.
  // Megatron-DeepSpeed offloads through DeepSpeed's activation checkpointing (below).
  if (q.offload.activations > 0 && dialect != Launcher::megatron_core && !deepspeed)
    return none("activation offload has no Megatron-LM flag but Megatron-Core's --cpu-offloading-num-layers "
                "(plan.framework megatron-core) or Megatron-DeepSpeed's --checkpoint-in-cpu (plan.framework deepspeed)");
  // torchao's dynamically scaled float8 is not Transformer Engine's recipe that --fp8-format runs;
  // tensorwise scaling is, where the framework's FP8 is Transformer Engine's (--fp8-recipe tensorwise).
  const bool te_recipe = p.training.fp8_scaling == Fp8Scaling::tensorwise || p.training.fp8_scaling == Fp8Scaling::mxfp8 ||
                         p.training.fp8_scaling == Fp8Scaling::blockwise;
  if (p.training.dtype == Dtype::fp8 && p.training.fp8_scaling != Fp8Scaling::delayed &&
      !(te_recipe && framework_traits(q.framework).fp8_transformer_engine))
    return none(std::string("torchao's ") + to_string(p.training.fp8_scaling) +
                " float8 is not a Transformer Engine recipe Megatron-LM's --fp8-format runs");
  // Megatron-DeepSpeed's GPTModelPipe fixes partition_method='type:transformer'; others have no flag.
  if (!q.partition_method.empty() && q.partition_method != "type:transformer")
    return none("DeepSpeed's partition_method " + q.partition_method + " has no Megatron-LM flag");
  std::ostringstream s;
  s << "--num-layers " << p.model.layers << " --hidden-size " << p.model.hidden << " --num-attention-heads "
    << p.model.heads << " --ffn-hidden-size " << p.model.ffn_hidden << " --seq-length " << p.model.seq_len
    << " --max-position-embeddings " << p.model.seq_len << " --micro-batch-size " << q.micro_batch
    << " --global-batch-size " << p.training.global_batch << " --tensor-model-parallel-size " << q.tp
    << " --pipeline-model-parallel-size " << q.pp;
  // Megatron-DeepSpeed: DeepSpeed's engine with the configuration written beside the plan
  // (deepspeed_config); --zero-stage builds the model under deepspeed.zero.Init at stage 3. It
  // builds GPTModelPipe, DeepSpeed's pipeline engine, unless told not to (pretrain_gpt.py
  // model_provider: `args.deepspeed and not args.no_pipeline_parallel`), even with one stage; that
  // engine refuses ZeRO-2 and 3 and turns overlap_comm off, and GPTModelPipe has no MoE layers (the
  // MoE scripts pass the flag), so one-stage ZeRO-2/3 and MoE plans run the plain engine, as the
  // simulator prices them (the Azure ZeRO-3 runs passed it too: --deepspeed --no-pipeline-parallel
  // --zero-stage 3). --cpu-optimizer builds DeepSpeedCPUAdam, the host optimizer ZeRO-Offload steps.
  if (deepspeed) {
    const bool pipeline_engine = !(q.pp == 1 && (q.zero >= 2 || p.model.moe));
    // GPTModelPipe checkpoints every recompute_num_layers layers (PipelineModule's
    // activation_checkpoint_interval) and has no block method (megatron/model/gpt_model.py @ f4157bea:
    // "deepspeed's pipeline doesn't support the block recompute method").
    if (pipeline_engine && q.recompute == Recompute::full && q.recompute_layers > 0)
      return none("DeepSpeed's pipeline engine recomputes every layer or none (plan.recompute_layers " +
                  std::to_string(q.recompute_layers) + " has no Megatron-DeepSpeed flag there)");
    s << " --deepspeed --deepspeed_config ds_config.json --zero-stage " << q.zero;
    if (!pipeline_engine) s << " --no-pipeline-parallel";
    if (q.offload.optimizer) s << " --cpu-optimizer";
    // Activation offload is DeepSpeed's checkpointing with its checkpoints on the host: Megatron-
    // DeepSpeed configures that checkpointing only under --deepspeed-activation-checkpointing, and
    // then with its own flags over the configuration file's (initialize.py @ f4157bea passes
    // checkpoint_in_cpu=args.checkpoint_in_cpu, a store_true, which DeepSpeed's configure() lets
    // override ds_config.json's cpu_checkpointing), so the flag carries it.
    if (q.offload.activations > 0) s << " --deepspeed-activation-checkpointing --checkpoint-in-cpu";
  }
  // Any other split per stage or model chunk: Megatron-Core's explicit layout (core_r0.13+,
  // --pipeline-model-parallel-layout; E the embedding, t a decoder layer, m an MTP layer, L the
  // loss, chunks in model order split by |; the virtual stages follow from the chunk count).
  // Megatron-LM 2021-22 splits every model chunk evenly and has no such flag.
  const bool layout = !q.stage_layers.empty() && dialect == Launcher::megatron_core;
  if (layout) {
    std::string chunks;
    for (std::size_t k = 0; k < q.stage_layers.size(); ++k) {
      if (k) chunks += '|';
      if (k == 0) chunks += 'E';
      chunks.append(std::size_t(q.stage_layers[k]), 't');
      if (k + 1 == q.stage_layers.size()) {
        chunks.append(std::size_t(p.model.mtp_layers), 'm');
        chunks += 'L';
      }
    }
    s << " --pipeline-model-parallel-layout \"" << chunks << "\"";
  }
  // A first chunk of the embedding alone, or a last one of the loss (and MTP modules) alone,
  // needs that layout.
  if (!layout && !q.stage_layers.empty() && (q.stage_layers.back() == 0 || q.stage_layers.front() == 0))
    return none("a first stage of only the embedding or a last stage of only the loss (and MTP modules) needs "
                "Megatron-Core's layout flag (plan.framework megatron-core)");
  if (!layout && q.schedule == Schedule::interleaved && !q.stage_layers.empty())
    return none("Megatron-LM splits every interleaved model chunk evenly (a count per chunk needs plan.framework megatron-core)");
  if (!layout && q.schedule == Schedule::interleaved)
    s << " --num-layers-per-virtual-pipeline-stage " << p.model.layers / (q.pp * q.virtual_stages);
  // Megatron-Core overlaps the interleaved schedule's sends unless told not to.
  if (const FrameworkTraits& fw = framework_traits(q.framework);
      fw.p2p_overlap && q.schedule == Schedule::interleaved && q.pp > 1 && !fw.overlaps_pipeline_sends(q))
    s << " --no-overlap-p2p-communication";
  if (q.first_stage_layers > 0) s << " --decoder-first-pipeline-num-layers " << q.first_stage_layers;
  if (q.last_stage_layers > 0) s << " --decoder-last-pipeline-num-layers " << q.last_stage_layers;
  if (!layout && !q.stage_layers.empty()) {
    // Megatron-LM takes first/last counts with the rest even; another list has no flag.
    const std::vector<int>& l = q.stage_layers;
    if (l.size() <= 2) return none("Megatron-LM takes first and last stage counts only with a middle stage between them");
    const bool middle_even = std::adjacent_find(l.begin() + 1, l.end() - 1, std::not_equal_to<>()) == l.end() - 1;
    if (!middle_even) return none("Megatron-LM splits the middle stages evenly (this plan.stage_layers does not)");
    s << " --decoder-first-pipeline-num-layers " << l.front() << " --decoder-last-pipeline-num-layers " << l.back();
  }
  if (q.sequence_parallel) s << " --sequence-parallel";
  if (q.recompute == Recompute::full && q.recompute_layers > 0)
    s << " --recompute-granularity full --recompute-method block --recompute-num-layers " << q.recompute_layers;
  else if (q.recompute == Recompute::full)
    s << " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (q.recompute_modules.any()) {
    // Megatron-Core's per-module recompute rides on the selective granularity, whose default
    // module list is core_attn (TransformerConfig.recompute_modules).
    s << " --recompute-granularity selective --recompute-modules";
    if (q.recompute == Recompute::selective) s << " core_attn";
    s << " " << recompute_module_names(q.recompute_modules, " ");
  } else if (q.recompute == Recompute::selective) {
    s << " --recompute-granularity selective";
  }
  // Megatron-FSDP: ZeRO-2 shards optimizer state and gradients (optim_grads), ZeRO-3 the
  // parameters too (optim_grads_params), beside the distributed optimizer; arguments.py asserts
  // the fsdp_dtensor checkpoint format and CUDA_DEVICE_MAX_CONNECTIONS above 1 in the environment,
  // and Megatron-FSDP overlaps its own gathers and reduce-scatters (megatron_fsdp.py turns
  // overlap_grad_reduce and overlap_param_gather on; core_v0.14-0.15).
  if (fsdp)
    s << " --use-megatron-fsdp --data-parallel-sharding-strategy " << (q.zero >= 3 ? "optim_grads_params" : "optim_grads")
      << " --ckpt-format fsdp_dtensor";
  // (DeepSpeed's sharding and overlap_comm are its configuration's, not Megatron's optimizer's.)
  if (q.zero >= 1 && !deepspeed) s << " --use-distributed-optimizer";
  if (optimizer_instances) s << " --num-distributed-optimizer-instances " << q.grad_ranks() / q.shard_group;
  if ((q.dp_overlap && !deepspeed) || fsdp) s << " --overlap-grad-reduce";
  // Megatron-LM fuses by default; where the simulator priced the separate pass, say so.
  if (!framework_traits(q.framework).fuses_gradient_accumulation(q)) s << " --no-gradient-accumulation-fusion";
  if (q.param_gather_overlap || (fsdp && q.zero >= 3)) s << " --overlap-param-gather";
  if (q.fp8_param_gather) s << " --fp8-param-gather";
  // The host-side optimizer (core_v0.12+): arguments.py asserts the precision-aware optimizer
  // with it, whose default dtypes (fp32 main parameters, gradients and moments) keep the state
  // the memory model counts.
  if (q.offload.optimizer && !deepspeed) s << " --optimizer-cpu-offload --use-precision-aware-optimizer";
  if (q.offload.activations > 0 && !deepspeed)
    s << " --cpu-offloading-num-layers " << std::lround(q.offload.activations * p.model.layers);
  if (q.tp_overlap) s << " --tp-comm-overlap";
  // Megatron-DeepSpeed's Ulysses has a flag of its own and one exchange.
  if (q.cp > 1 && dialect == Launcher::megatron_deepspeed)
    s << " --ds-sequence-parallel-size " << q.cp;
  else if (q.cp > 1)
    s << " --context-parallel-size " << q.cp << " --cp-comm-type "
      << (q.cp_comm == CpComm::ring         ? "p2p"
          : q.cp_comm == CpComm::all_gather ? "all_gather"
          : q.cp_comm == CpComm::all_to_all ? "a2a"
                                            : "a2a+p2p");
  // Megatron-Core's hierarchical sizes, innermost (the all-to-all groups) first (core_r0.10.0).
  if (q.cp > 1 && q.cp_comm == CpComm::all_to_all_ring && dialect != Launcher::megatron_deepspeed)
    s << " --hierarchical-context-parallel-sizes " << q.cp_heads() << " " << q.cp_ring();
  if (p.model.kv_heads != p.model.heads) s << " --group-query-attention --num-query-groups " << p.model.kv_heads;
  if (p.model.moe)
    s << " --num-experts " << p.model.moe->experts << " --moe-router-topk " << p.model.moe->top_k
      << " --expert-model-parallel-size " << q.ep;
  // The dispatcher and grouped GEMMs the simulator priced for Megatron-Core (MoeDispatch::alltoall).
  if (p.model.moe && q.ep_dispatcher == EpDispatcher::deepep)
    s << " --moe-token-dispatcher-type flex --moe-enable-deepep --moe-grouped-gemm";
  else if (p.model.moe && framework_traits(q.framework).moe_dispatch == MoeDispatch::alltoall)
    s << " --moe-token-dispatcher-type alltoall --moe-grouped-gemm";
  if (p.model.moe && q.etp() != q.tp) s << " --expert-tensor-parallel-size " << q.etp();
  if (q.ep_overlap) s << " --overlap-moe-expert-parallel-comm --delay-wgrad-compute";
  if (q.moe_permute_fusion) s << " --moe-permute-fusion";
  if (q.moe_shared_expert_overlap) s << " --moe-shared-expert-overlap";
  if (q.defer_embedding_wgrad)
    s << " --defer-embedding-wgrad-compute --wgrad-deferral-limit " << q.wgrad_deferral_limit;
  if (!q.fused_softmax.value_or(true)) s << " --no-masked-softmax-fusion";
  if (q.cross_entropy_fusion != CrossEntropyFusion::none)
    s << " --cross-entropy-loss-fusion --cross-entropy-fusion-impl " << to_string(q.cross_entropy_fusion);
  // Multi-token prediction modules on the last stage (Megatron-Core's default layout).
  if (p.model.mtp_layers > 0) s << " --mtp-num-layers " << p.model.mtp_layers;
  if (p.model.moe && p.model.moe->expert_ffn_hidden > 0) s << " --moe-ffn-hidden-size " << p.model.moe->expert_ffn_hidden;
  if (p.model.moe && p.model.moe->shared_experts > 0)
    s << " --moe-shared-expert-intermediate-size " << p.model.moe->shared_experts * p.model.expert_ffn();
  if (p.model.moe && !p.model.moe->dropless) s << " --moe-expert-capacity-factor " << p.model.moe->capacity_factor;
  if (p.model.activation == Activation::swiglu) s << " --swiglu";
  if (p.model.activation == Activation::squared_relu) s << " --squared-relu";
  // No Megatron-LM flag for GeGLU or a plain ReLU (its MLP takes gelu, swiglu or squared relu).
  if (p.model.activation == Activation::geglu || p.model.activation == Activation::relu)
    return none(std::string("Megatron-LM's MLP has no ") + to_string(p.model.activation) + " (gelu, swiglu or squared relu)");
  // Nor for these (sliding-window patterns, sinks and parallel blocks are other codebases':
  // GPT-OSS, GPT-NeoX, PaLM; Megatron-LM's --optimizer is adam or sgd).
  if (p.model.attention_window) return none("sliding-window attention layers have no Megatron-LM flag here");
  if (p.model.attention_sinks) return none("attention sinks have no Megatron-LM flag here");
  if (p.model.parallel_block) return none("parallel attention and MLP blocks have no Megatron-LM flag");
  if (p.training.optimizer == Optimizer::lamb) return none("Megatron-LM's --optimizer is adam or sgd, not lamb");
  // NeMo's distributed Adam with a bf16 state keeps no master copy; Megatron-Core's precision-aware
  // optimizer keeps one (--main-params-dtype fp32 or fp16): no equivalent flags.
  if (p.training.optimizer_state_dtype != Dtype::fp32)
    return none("a 16-bit optimizer state without a master copy (training.optimizer_state_dtype) has no Megatron-LM flags");
  if (p.training.optimizer == Optimizer::sgd) s << " --optimizer sgd";
  if (!p.model.tie_embeddings) s << " --untie-embeddings-and-output-weights";
  if (p.model.position == PositionEmbedding::rope) s << " --position-embedding-type rope";
  if (p.model.norm == Norm::rmsnorm) s << " --normalization RMSNorm";
  if (!p.model.bias) s << " --disable-bias-linear";
  if (p.model.attention_head_dim > 0) s << " --kv-channels " << p.model.attention_head_dim;
  if (p.model.mla) {
    const MlaSpec& a = *p.model.mla;
    s << " --multi-latent-attention --kv-lora-rank " << a.kv_lora_rank << " --qk-head-dim " << a.qk_nope_head_dim
      << " --qk-pos-emb-head-dim " << a.qk_rope_head_dim << " --v-head-dim " << a.v_head_dim;
    if (a.q_lora_rank > 0) s << " --q-lora-rank " << a.q_lora_rank;
  }
  if (p.model.moe && (p.model.moe->first_dense > 0 || p.model.moe->every > 1)) {
    // Which layers are MoE layers, as Megatron-Core's explicit --moe-layer-freq list (its integer
    // form counts from layer 0, ModelSpec::is_moe_layer from the every-th).
    s << " --moe-layer-freq [";
    for (int l = 0; l < p.model.layers; ++l) s << (l ? "," : "") << (p.model.is_moe_layer(l) ? 1 : 0);
    s << "]";
  }
  // MXFP8 (core_v0.13+ --fp8-recipe mxfp8): E4M3 both ways, as Megatron-Bridge's
  // bf16_with_mxfp8_mixed sets it, and with FP8 parameters the gradient buffer lent to their
  // all-gather (--reuse-grad-buf-for-mxfp8-param-ag, which Megatron-Core recommends with them).
  const bool mxfp8 = p.training.dtype == Dtype::fp8 && p.training.fp8_scaling == Fp8Scaling::mxfp8;
  const bool e4m3 = mxfp8 || (p.training.dtype == Dtype::fp8 && p.training.fp8_scaling == Fp8Scaling::blockwise);
  if (p.training.dtype == Dtype::fp8) s << (e4m3 ? " --bf16 --fp8-format e4m3" : " --bf16 --fp8-format hybrid");
  if (p.training.dtype == Dtype::fp8 && p.training.fp8_scaling == Fp8Scaling::tensorwise) s << " --fp8-recipe tensorwise";
  if (mxfp8) s << " --fp8-recipe mxfp8";
  // Float8BlockScaling (core_v0.13+ --fp8-recipe blockwise): E4M3 both ways (its recipe's default).
  if (p.training.dtype == Dtype::fp8 && p.training.fp8_scaling == Fp8Scaling::blockwise) s << " --fp8-recipe blockwise";
  if (mxfp8 && q.fp8_param_gather) s << " --reuse-grad-buf-for-mxfp8-param-ag";
  if (p.training.dtype == Dtype::bf16) s << " --bf16";
  if (p.training.dtype == Dtype::fp16) s << " --fp16";
  return s.str();
}

namespace {

/// The ibm-fms LLaMA variants fms-fsdp builds by name (fms_fsdp/utils/config_utils.py
/// get_model_config @ 5a296af; ibm-fms LLaMAConfig: vocabulary 32,000 unless stated, the FFN
/// hidden_grow_factor x emb_dim rounded up to multiple_of 256 (4096 for llama2_70b)). The llama3
/// variants cache rotary frequencies for 8192 positions, their _4k twins for 4096.
struct FmsVariant {
  const char* name;
  int layers, hidden, heads, kv_heads, ffn, vocab, max_seq;
};
constexpr FmsVariant kFmsVariants[] = {
    {"llama2_7b", 32, 4096, 32, 32, 11008, 32000, 4096},
    {"llama2_13b", 40, 5120, 40, 40, 13824, 32000, 4096},
    {"llama2_34b", 48, 8192, 64, 8, 22016, 32000, 16384},
    {"llama2_70b", 80, 8192, 64, 8, 28672, 32000, 4096},
    {"llama2_1.4b", 24, 2048, 16, 4, 6144, 32000, 4096},
    {"llama3_194m_4k", 10, 1024, 8, 8, 2816, 128256, 4096},
    {"llama3_1.8b_4k", 24, 2048, 16, 8, 7168, 128256, 4096},
    {"llama3_1.8b", 24, 2048, 16, 8, 7168, 128256, 8192},
    {"llama3_3.2b_4k", 24, 3072, 24, 8, 8192, 128256, 4096},
    {"llama3_3.2b", 24, 3072, 24, 8, 8192, 128256, 8192},
    {"llama3_8b_4k", 32, 4096, 32, 8, 14336, 128256, 4096},
    {"llama3_8b", 32, 4096, 32, 8, 14336, 128256, 8192},
    {"llama3_70b_4k", 80, 8192, 64, 8, 28672, 128256, 4096},
    {"llama3_70b", 80, 8192, 64, 8, 28672, 128256, 8192},
};

/// p / q in lowest terms ("1/2"), or "1" / "0": fms-fsdp evaluates a fraction string it is given.
std::string fraction(int p, int q) {
  if (p == 0) return "0";
  const int g = std::gcd(p, q);
  return p == q ? "1" : std::to_string(p / g) + "/" + std::to_string(q / g);
}

}  // namespace

std::string fms_fsdp_arguments(const ExecutablePlan& p, std::string* why_not) {
  auto none = [why_not](const std::string& why) {
    if (why_not) *why_not = why;
    return std::string();
  };
  const PlanSpec& q = p.plan;
  const ModelSpec& m = p.model;
  if (framework_traits(q.framework).launcher != Launcher::fms_fsdp)
    return none("the plan's framework is " + std::string(to_string(q.framework)));
  // The first variant of the model's shapes whose rotary cache covers its sequence.
  const FmsVariant* variant = nullptr;
  for (const FmsVariant& v : kFmsVariants)
    if (v.layers == m.layers && v.hidden == m.hidden && v.heads == m.heads && v.kv_heads == m.kv_heads &&
        v.ffn == m.ffn_hidden && v.vocab == m.vocab && m.seq_len <= v.max_seq && !m.moe &&
        m.activation == Activation::swiglu && m.norm == Norm::rmsnorm && m.position == PositionEmbedding::rope) {
      variant = &v;
      break;
    }
  if (!variant)
    return none("fms-fsdp builds its LLaMA variants by name (fms_fsdp/utils/config_utils.py) and none has model " +
                m.name + "'s shapes (layers, hidden, heads, KV heads, FFN, vocabulary, RoPE SwiGLU RMSNorm)");
  // Its precision flag: mixed_precision True is bfSixteen (bf16 parameters, reduction and buffers)
  // on a GPU with bf16, False full fp32; it picks fpSixteen itself only where the GPU lacks bf16
  // (train_utils.py get_mixed_precision_policy).
  const Dtype dt = p.training.dtype;
  if (dt != Dtype::bf16 && dt != Dtype::fp32 && dt != Dtype::tf32)
    return none(std::string("fms-fsdp trains in bf16 or fp32 by flag (mixed_precision); ") + to_string(dt) +
                " has none (it falls back to fp16 only on a GPU without bf16)");
  if (q.reduce_dtype && dt == Dtype::bf16 && *q.reduce_dtype != Dtype::bf16)
    return none(std::string("fms-fsdp's bfSixteen reduces gradients in bf16; plan.reduce_dtype ") +
                to_string(*q.reduce_dtype) + " has no flag");
  const bool hybrid = q.shard_group > 0 && q.shard_group != q.grad_ranks();
  const int nodes = (p.gpus + p.gpus_per_node - 1) / p.gpus_per_node;
  const bool ac = q.recompute == Recompute::full;
  std::ostringstream o;
  // One torchrun per node; across nodes each needs its rank and node 0's address, which fms-fsdp's
  // scripts/train.sh takes from Slurm (NODE_RANK and MASTER_ADDR here, to be set per node).
  o << "torchrun --nnodes=" << nodes;
  if (nodes > 1) o << " --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=12234";
  o << " --nproc_per_node=" << std::min(p.gpus, p.gpus_per_node) << " main_training_llama.py"
    << " --model_variant=" << variant->name << " --sharding_strategy=" << (hybrid ? "hsdp" : "fsdp")
    << " --fsdp_activation_checkpointing=" << (ac ? "True" : "False");
  // Its selective_checkpointing is the share of blocks checkpointed, evenly spaced (ac_handler.py);
  // the plan's recompute_layers counts them.
  if (ac) o << " --selective_checkpointing=" << fraction(q.recompute_layers > 0 ? q.recompute_layers : m.layers, m.layers);
  o << " --mixed_precision=" << (dt == Dtype::bf16 ? "True" : "False") << " --batch_size=" << q.micro_batch << " --seq_length=" << m.seq_len
    << " --vocab_size=" << m.vocab << " --use_torch_compile=" << (q.compile ? "True" : "False");
  return o.str();
}

nlohmann::ordered_json deepspeed_config(const ExecutablePlan& p, std::string* why_not) {
  const PlanSpec& q = p.plan;
  auto none = [why_not](const std::string& why) {
    if (why_not) *why_not = why;
    return nlohmann::ordered_json();
  };
  if (framework_traits(q.framework).launcher != Launcher::megatron_deepspeed)
    return none(std::string("a DeepSpeed configuration is written for plans of framework deepspeed (this one is ") +
                to_string(q.framework) + ")");
  if (p.training.dtype == Dtype::fp8 || p.training.dtype == Dtype::tf32)
    return none(std::string("DeepSpeed has no ") + to_string(p.training.dtype) + " training mode (fp32, fp16 or bf16)");
  // cpu_checkpointing moves every checkpoint of the recomputed layers: all or nothing.
  if (q.offload.activations > 0 && q.offload.activations < 1)
    return none("DeepSpeed's cpu_checkpointing offloads every checkpoint, not a fraction (plan.offload.activations " +
                value_text(q.offload.activations) + ")");
  const FrameworkTraits& fw = framework_traits(q.framework);
  // plan.partitioned_pipe_grads and plan.zero3_prefetch have no key here: they name which DeepSpeed
  // release was priced (the pipeline engine before or after v0.5.4; ZeRO-3 with or without a
  // complete prefetch trace), and the configuration runs on whichever release is installed.
  nlohmann::ordered_json c;
  // DeepSpeed's world for the batch is the data-parallel group (mpu.get_data_parallel_world_size();
  // runtime/config.py _batch_assertion: train_batch == micro_batch * grad_acc * world_size), which
  // leaves Ulysses' sequence ranks out (they hold parts of the same sequences).
  c["train_batch_size"] = p.training.global_batch;
  c["train_micro_batch_size_per_gpu"] = q.micro_batch;
  c["gradient_accumulation_steps"] = p.training.global_batch / (q.micro_batch * q.dp);
  // "bfloat16" is the key v0.5 reads, and every release since keeps it (runtime/precision_config.py
  // BFLOAT16_OLD) beside the newer "bf16". fp16 with dynamic loss scaling (loss_scale 0).
  if (p.training.dtype == Dtype::bf16) c["bfloat16"] = {{"enabled", true}};
  if (p.training.dtype == Dtype::fp16) c["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  nlohmann::ordered_json z;
  // DeepSpeed builds its BF16_Optimizer for bf16 with ZeRO stage 0 (runtime/engine.py,
  // _configure_bf16_optimizer), which shards the fp32 state itself: the plan's zero 1.
  const int stage = q.bf16_optimizer ? 0 : q.zero;
  z["stage"] = stage;
  if (stage > 0) {
    // The bucket the simulator priced: the plan's, else the framework's default (5e8 elements).
    z["reduce_bucket_size"] = static_cast<long long>(fw.reduce_bucket_elements(q));
    // ZeRO-1/2: the plan's overlap (the pipeline engine turns overlap_comm off whatever the config
    // says, pipe/engine.py, and so does the plan: FrameworkTraits::overlaps_dp_reduction). Stage 3
    // keeps DeepSpeed's own default, the setting of the runs its entry was read from.
    if (q.zero < 3) z["overlap_comm"] = q.dp_overlap;
  }
  if (q.offload.optimizer) z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (q.zero >= 3) {
    z["stage3_max_reuse_distance"] = static_cast<long long>(fw.zero3_reuse_elements);
    z["stage3_param_persistence_threshold"] = static_cast<long long>(fw.zero3_persistence_elements);
  }
  c["zero_optimization"] = z;
  if (q.recompute == Recompute::full)
    c["activation_checkpointing"] = {{"partition_activations", false},
                                     {"cpu_checkpointing", q.offload.activations > 0},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false}};
  return c;
}

}  // namespace foresight
