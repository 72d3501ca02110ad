// plan.json: what the planner writes, the trainer's reader accepts unchanged; malformed plans are
// refused naming the field.
#include <gtest/gtest.h>

#include <functional>

#include "core/plan_json.hpp"

using namespace foresight;

namespace {
ExecutablePlan sample() {
  ExecutablePlan p;
  p.model = ModelSpec{.name = "tiny", .layers = 4, .hidden = 64, .heads = 4, .seq_len = 32, .vocab = 100,
                      .ffn_hidden = 256, .kv_heads = 4, .moe = std::nullopt};
  p.cluster = "local";
  p.gpus_per_node = 8;
  p.training = TrainingSpec{.global_batch = 16, .dtype = Dtype::fp32, .optimizer = Optimizer::adam};
  p.plan.tp = 2;
  p.plan.pp = 2;
  p.plan.dp = 2;
  p.plan.micro_batch = 2;
  p.plan.recompute = Recompute::full;
  p.plan.zero = 1;
  p.gpus = 8;
  p.steps = 20;
  p.prediction = PlanPrediction{1.5, 100.0, 3.0, 2.0, "analytic"};
  return p;
}
/// sample() as a bf16 Megatron-Core plan without a pipeline: dp data-parallel ranks, ZeRO `zero`.
ExecutablePlan megatron_core_flat(int dp, int zero) {
  ExecutablePlan p = sample();
  p.training.dtype = Dtype::bf16;
  p.plan.framework = Framework::megatron_core;
  p.plan.pp = 1;
  p.plan.dp = dp;
  p.plan.zero = zero;
  return p;
}
/// megatron_arguments(p) has no arguments for `p` and its reason names `says`.
void expect_no_megatron_arguments(const ExecutablePlan& p, const std::string& says) {
  std::string why;
  EXPECT_TRUE(megatron_arguments(p, &why).empty()) << megatron_arguments(p);
  EXPECT_NE(why.find(says), std::string::npos) << why;
}
void expect_refused(const std::string& text, const std::string& field) {
  try {
    parse_plan_json(text, "plan.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(std::string(e.what()).find("plan.json"), std::string::npos);
  }
}
}  // namespace

TEST(PlanJson, RoundTrip) {
  const ExecutablePlan p = sample();
  const ExecutablePlan q = parse_plan_json(to_json(p).dump(), "plan.json");
  EXPECT_EQ(to_json(q).dump(), to_json(p).dump());
  EXPECT_EQ(q.plan.tp, 2);
  EXPECT_EQ(q.plan.recompute, Recompute::full);
  ASSERT_TRUE(q.prediction.has_value());
  EXPECT_DOUBLE_EQ(q.prediction->iteration_s, 1.5);
  ExecutablePlan o = sample();
  o.plan.dp_overlap = true;
  EXPECT_TRUE(parse_plan_json(to_json(o).dump(), "plan.json").plan.dp_overlap);
  EXPECT_FALSE(q.plan.dp_overlap);
}

TEST(PlanJson, RefusesMalformedPlans) {
  auto j = to_json(sample());
  auto with = [&](auto edit) {
    auto k = j;
    edit(k);
    return k.dump();
  };
  expect_refused("{not json", "");
  expect_refused(with([](auto& k) { k["schema_version"] = 2; }), "schema_version");
  expect_refused(with([](auto& k) { k["plan"]["tp"] = "two"; }), "plan.tp");
  expect_refused(with([](auto& k) { k["plan"]["dp"] = 3; }), "plan");  // 2*2*3 != 8 GPUs
  expect_refused(with([](auto& k) { k["plan"]["schedule"] = "2f2b"; }), "plan.schedule");
  expect_refused(with([](auto& k) { k["plan"]["nonsense"] = 1; }), "plan.nonsense");
  expect_refused(with([](auto& k) { k.erase("model"); }), "model");
  expect_refused(with([](auto& k) { k["model"]["layers"] = -4; }), "model.layers");
  expect_refused(with([](auto& k) { k["plan"]["token_slices"] = {16, -16}; }), "plan.token_slices[1]");
  expect_refused(with([](auto& k) { k["training"]["global_batch"] = 15; }), "training.global_batch");
}

TEST(PlanJson, RefusesNumbersBeyondWhatThePlanCanHold) {
  auto j = to_json(sample());
  auto with = [&](auto edit) {
    auto k = j;
    edit(k);
    return k.dump();
  };
  // More GPUs than any cluster (core/hardware.hpp kMaxClusterGpus = 2^24); gpus + gpus_per_node
  // used to overflow when the nodes were counted.
  expect_refused(with([](auto& k) { k["gpus"] = 2147483647; }), "gpus");
  expect_refused(with([](auto& k) { k["cluster"]["gpus_per_node"] = 2147483647; }), "cluster.gpus_per_node");
  // The default ffn_hidden, 4 * hidden, beyond an int.
  expect_refused(with([](auto& k) {
                   k["model"]["hidden"] = 1073741824;
                   k["model"].erase("ffn_hidden");
                 }),
                 "model.ffn_hidden");
  // An unsigned integer beyond int64 is too large, not negative.
  try {
    parse_plan_json(with([](auto& k) { k["plan"]["tp"] = 18446744073709551615ULL; }), "plan.json");
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "plan.tp");
    EXPECT_EQ(e.rule(), "must be at most 2147483647");
  }
  // Numbers beyond a double and deep nesting are refused through SpecError with a short message.
  expect_refused(R"({"schema_version": 1e999})", "");
  const std::string deep = R"({"schema_version": 1, "model": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    parse_plan_json(deep, "plan.json");
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "model");
    EXPECT_LT(std::string(e.what()).size(), 200u) << "the value is described, not dumped";
  }
}

TEST(PlanJson, NoMegatronArgumentsSaysWhy) {
  // megatron_args.txt names what has no flag, not the schedule whatever the cause.
  ExecutablePlan t = sample();
  t.plan.schedule = Schedule::terapipe;
  expect_no_megatron_arguments(t, "TeraPipe");
  ExecutablePlan z = sample();
  z.plan.framework = Framework::pytorch;
  z.plan.pp = 1;
  z.plan.zero = 3;
  expect_no_megatron_arguments(z, "ZeRO-3 as pytorch runs it");
  ExecutablePlan relu = sample();
  relu.model.activation = Activation::relu;
  expect_no_megatron_arguments(relu, "relu");
}

TEST(PlanJson, MegatronCoreShardedPlansRunMegatronFsdp) {
  // Megatron-Core's ZeRO-2/3 is Megatron-FSDP (core_v0.15.0 megatron/training/arguments.py:
  // --use-megatron-fsdp, --data-parallel-sharding-strategy optim_grads_params | optim_grads, the
  // asserted --ckpt-format fsdp_dtensor), beside the distributed optimizer, its collectives
  // overlapped (megatron_fsdp.py forces both overlaps on).
  ExecutablePlan p = megatron_core_flat(4, 3);
  p.plan.dp_overlap = true;
  const std::string args = megatron_arguments(p);
  for (const char* flag : {"--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params",
                           "--ckpt-format fsdp_dtensor", "--use-distributed-optimizer", "--overlap-grad-reduce",
                           "--overlap-param-gather", "--bf16"})
    EXPECT_NE(args.find(flag), std::string::npos) << flag << " missing: " << args;
  EXPECT_EQ(args.find("--use-torch-fsdp2"), std::string::npos) << args;
  // Gradient-accumulation fusion stays Megatron-LM's default unless the plan turns it off.
  EXPECT_EQ(args.find("--no-gradient-accumulation-fusion"), std::string::npos) << args;
  ExecutablePlan unfused = p;
  unfused.plan.gradient_accumulation_fusion = false;
  EXPECT_NE(megatron_arguments(unfused).find("--no-gradient-accumulation-fusion"), std::string::npos);
  // ZeRO-2 shards the optimizer state and the gradients only.
  ExecutablePlan z2 = p;
  z2.plan.zero = 2;
  EXPECT_NE(megatron_arguments(z2).find("--data-parallel-sharding-strategy optim_grads "), std::string::npos)
      << megatron_arguments(z2);
  // The same plan at zero 1 is the distributed optimizer alone.
  ExecutablePlan z1 = p;
  z1.plan.zero = 1;
  EXPECT_NE(megatron_arguments(z1).find("--use-distributed-optimizer --overlap-grad-reduce"), std::string::npos)
      << megatron_arguments(z1);
  EXPECT_EQ(megatron_arguments(z1).find("--use-megatron-fsdp"), std::string::npos);
  // Hybrid sharding: Megatron-FSDP replicated over distributed-optimizer instances.
  ExecutablePlan hsdp = p;
  hsdp.plan.shard_group = 2;
  EXPECT_NE(megatron_arguments(hsdp).find("--num-distributed-optimizer-instances 2"), std::string::npos)
      << megatron_arguments(hsdp);
}

TEST(PlanJson, InterleavedSendsOverlapUnlessThePlanSaysNot) {
  // Megatron-Core overlaps the interleaved schedule's sends by default (--no-overlap-p2p-communication
  // turns it off); the flag appears only where the plan turns it off.
  ExecutablePlan p = megatron_core_flat(2, 1);
  p.plan.pp = 2;
  p.plan.dp = 1;
  p.plan.schedule = Schedule::interleaved;
  p.plan.virtual_stages = 2;
  EXPECT_EQ(megatron_arguments(p).find("overlap-p2p"), std::string::npos) << megatron_arguments(p);
  p.plan.p2p_overlap = false;
  EXPECT_NE(megatron_arguments(p).find("--no-overlap-p2p-communication"), std::string::npos) << megatron_arguments(p);
}

TEST(PlanJson, SoftmaxFallbackTravelsAndReachesTheLaunchLine) {
  // plan.fused_softmax false survives plan.json, and Megatron-LM's arguments say
  // --no-masked-softmax-fusion (megatron/arguments.py: store_false into masked_softmax_fusion);
  // unset, neither appears.
  ExecutablePlan p = sample();
  p.training.dtype = Dtype::bf16;
  EXPECT_EQ(to_json(p).dump().find("fused_softmax"), std::string::npos);
  EXPECT_EQ(megatron_arguments(p).find("masked-softmax"), std::string::npos) << megatron_arguments(p);
  p.plan.fused_softmax = false;
  const ExecutablePlan q = parse_plan_json(to_json(p).dump(), "plan.json");
  ASSERT_TRUE(q.plan.fused_softmax.has_value());
  EXPECT_FALSE(*q.plan.fused_softmax);
  EXPECT_NE(megatron_arguments(q).find("--no-masked-softmax-fusion"), std::string::npos) << megatron_arguments(q);
}

TEST(PlanJson, DeepSpeedPlansLaunchMegatronDeepSpeedWithTheirConfig) {
  // Megatron-DeepSpeed reads the ZeRO stage and overlap_comm from ds_config.json, not from
  // Megatron's distributed optimizer. DeepSpeed's pipeline engine asserts ZeRO stage < 2 and forces
  // overlap_comm off, and Megatron-DeepSpeed builds it unless --no-pipeline-parallel is passed, so a
  // one-stage ZeRO-2/3 plan passes it (as the Azure ZeRO-3 runs did); a one-stage ZeRO-1 plan keeps
  // GPTModelPipe (the DeepSpeed-MoE dense scripts ran it with one stage).
  ExecutablePlan p = sample();
  p.plan.framework = Framework::deepspeed;
  p.training.dtype = Dtype::fp16;
  p.plan.tp = 2;
  p.plan.pp = 1;
  p.plan.dp = 4;
  p.plan.zero = 2;
  p.plan.dp_overlap = true;
  p.plan.offload.optimizer = true;
  std::string a = megatron_arguments(p);
  EXPECT_NE(a.find("--deepspeed --deepspeed_config ds_config.json --zero-stage 2 --no-pipeline-parallel --cpu-optimizer"),
            std::string::npos)
      << a;
  for (const char* megatron_own : {"--use-distributed-optimizer", "--overlap-grad-reduce", "--optimizer-cpu-offload"})
    EXPECT_EQ(a.find(megatron_own), std::string::npos) << megatron_own << " in " << a;
  p.plan.zero = 3;
  p.plan.dp_overlap = false;
  EXPECT_NE(megatron_arguments(p).find("--zero-stage 3 --no-pipeline-parallel"), std::string::npos);
  p.plan.zero = 1;
  p.plan.offload.optimizer = false;
  a = megatron_arguments(p);
  EXPECT_NE(a.find("--zero-stage 1"), std::string::npos) << a;
  EXPECT_EQ(a.find("--no-pipeline-parallel"), std::string::npos) << a;
  // Activation offload: DeepSpeed's checkpointing with host checkpoints, which Megatron-DeepSpeed
  // configures from its own flags (its --checkpoint-in-cpu overrides the file's cpu_checkpointing).
  p.plan.recompute = Recompute::full;
  p.plan.offload.activations = 1.0;
  a = megatron_arguments(p);
  EXPECT_NE(a.find("--deepspeed-activation-checkpointing --checkpoint-in-cpu"), std::string::npos) << a;
  EXPECT_NE(a.find("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"),
            std::string::npos)
      << a;
  EXPECT_EQ(a.find("--cpu-offloading-num-layers"), std::string::npos) << a;
  EXPECT_TRUE(deepspeed_config(p)["activation_checkpointing"]["cpu_checkpointing"].get<bool>());
  // GPTModelPipe has no block recompute: a partial recompute under the pipeline engine has no flag;
  // the plain engine (one stage, ZeRO-2) takes Megatron's block method.
  p.plan.offload.activations = 0;
  p.plan.recompute_layers = 2;
  std::string why;
  EXPECT_EQ(megatron_arguments(p, &why), "");
  EXPECT_NE(why.find("pipeline engine"), std::string::npos) << why;
  p.plan.zero = 2;
  a = megatron_arguments(p);
  EXPECT_NE(a.find("--no-pipeline-parallel"), std::string::npos) << a;
  EXPECT_NE(a.find("--recompute-method block --recompute-num-layers 2"), std::string::npos) << a;
}

TEST(PlanJson, Zero3PrefetchChoiceTravels) {
  // plan.zero3_prefetch (DeepSpeed's ZeRO-3 with or without a complete trace) survives plan.json
  // both ways; unset, the field is not written.
  ExecutablePlan p = sample();
  p.plan.framework = Framework::deepspeed;
  p.plan.pp = 1;
  p.plan.dp = 4;
  p.plan.zero = 3;
  EXPECT_EQ(to_json(p).dump().find("zero3_prefetch"), std::string::npos);
  for (bool v : {false, true}) {
    p.plan.zero3_prefetch = v;
    const ExecutablePlan q = parse_plan_json(to_json(p).dump(), "plan.json");
    ASSERT_TRUE(q.plan.zero3_prefetch.has_value());
    EXPECT_EQ(*q.plan.zero3_prefetch, v);
  }
}

TEST(PlanJson, PipelineGradientPartitioningTravels) {
  // plan.partitioned_pipe_grads (DeepSpeed before v0.5.4 when false) survives plan.json both ways;
  // unset, the field is not written.
  ExecutablePlan p = sample();
  p.plan.framework = Framework::deepspeed;
  p.training.dtype = Dtype::fp16;
  EXPECT_EQ(to_json(p).dump().find("partitioned_pipe_grads"), std::string::npos);
  for (bool v : {false, true}) {
    p.plan.partitioned_pipe_grads = v;
    const ExecutablePlan q = parse_plan_json(to_json(p).dump(), "plan.json");
    ASSERT_TRUE(q.plan.partitioned_pipe_grads.has_value());
    EXPECT_EQ(*q.plan.partitioned_pipe_grads, v);
  }
}

TEST(PlanJson, Mxfp8RecipeArguments) {
  // Megatron-Bridge's bf16_with_mxfp8_mixed as Megatron-LM flags (core_v0.15.0 arguments.py):
  // E4M3 both ways, --fp8-recipe mxfp8, and with FP8 parameters the gradient buffer lent to their
  // all-gather; current scaling keeps the hybrid format.
  ExecutablePlan p = megatron_core_flat(4, 1);
  p.training.dtype = Dtype::fp8;
  p.training.fp8_scaling = Fp8Scaling::mxfp8;
  p.plan.fp8_param_gather = true;
  const std::string args = megatron_arguments(p);
  EXPECT_NE(args.find("--bf16 --fp8-format e4m3 --fp8-recipe mxfp8 --reuse-grad-buf-for-mxfp8-param-ag"),
            std::string::npos) << args;
  EXPECT_NE(args.find("--fp8-param-gather"), std::string::npos) << args;
  p.plan.fp8_param_gather = false;
  EXPECT_EQ(megatron_arguments(p).find("--reuse-grad-buf"), std::string::npos);
  p.training.fp8_scaling = Fp8Scaling::tensorwise;
  EXPECT_NE(megatron_arguments(p).find("--fp8-format hybrid --fp8-recipe tensorwise"), std::string::npos);
  // Float8BlockScaling (core_v0.13+): E4M3 both ways, --fp8-recipe blockwise.
  p.training.fp8_scaling = Fp8Scaling::blockwise;
  EXPECT_NE(megatron_arguments(p).find("--bf16 --fp8-format e4m3 --fp8-recipe blockwise"), std::string::npos)
      << megatron_arguments(p);
}

TEST(PlanJson, LaunchLinesAndMegatronArguments) {
  const ExecutablePlan p = sample();
  const std::string launch = launch_script(p, "plan.json");
  EXPECT_NE(launch.find("mpirun -np 8 --map-by ppr:8:node"), std::string::npos);
  EXPECT_NE(launch.find("srun --nodes=1 --ntasks=8"), std::string::npos);
  // A GPU plan runs on the CUDA backend in the plan's recipe, not the trainer's fp32 CPU default:
  // both launch lines say so.
  ASSERT_EQ(p.training.dtype, Dtype::fp32);
  const std::string gpu_flags = "--backend cuda --precision fp32";
  const auto first = launch.find(gpu_flags);
  ASSERT_NE(first, std::string::npos) << launch;
  EXPECT_NE(launch.find(gpu_flags, first + 1), std::string::npos) << launch;
  ExecutablePlan f8 = p;
  f8.training.dtype = Dtype::fp8;
  EXPECT_NE(launch_script(f8, "plan.json").find("has no fp8 recipe and runs bf16"), std::string::npos);
  ExecutablePlan other = p;
  other.training.dtype = Dtype::bf16;
  EXPECT_NE(launch_script(other, "plan.json").find("--backend cuda --precision bf16"), std::string::npos);
  other.training.dtype = Dtype::tf32;
  EXPECT_NE(launch_script(other, "plan.json").find("--backend cuda-tf32 --precision fp32"), std::string::npos);
  const std::string args = megatron_arguments(p);
  EXPECT_NE(args.find("--tensor-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(args.find("--pipeline-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(args.find("--recompute-granularity full"), std::string::npos);
  EXPECT_NE(args.find("--use-distributed-optimizer"), std::string::npos);
  EXPECT_EQ(args.find("--overlap-grad-reduce"), std::string::npos);
  ExecutablePlan o = p;
  o.plan.dp_overlap = true;
  EXPECT_NE(megatron_arguments(o).find("--overlap-grad-reduce"), std::string::npos);
  ExecutablePlan t = p;
  t.plan.schedule = Schedule::terapipe;
  EXPECT_TRUE(megatron_arguments(t).empty());  // no Megatron-LM equivalent
  // Model features and an optimizer Megatron-LM has no flags for: no arguments rather than
  // arguments for another model.
  for (auto edit : std::vector<std::function<void(ExecutablePlan&)>>{
           [](ExecutablePlan& x) { x.model.parallel_block = true; },
           [](ExecutablePlan& x) { x.model.attention_window = AttentionWindowSpec{.size = 128, .pattern = {1, 0}}; },
           [](ExecutablePlan& x) { x.model.attention_sinks = true; },
           [](ExecutablePlan& x) { x.model.activation = Activation::relu; },  // Megatron-LM: gelu, swiglu, squared relu
           [](ExecutablePlan& x) { x.training.optimizer = Optimizer::lamb; }}) {
    ExecutablePlan u = p;
    edit(u);
    EXPECT_TRUE(megatron_arguments(u).empty());
  }
  ExecutablePlan srelu = p;  // Nemotron-4's MLP (megatron/training/arguments.py --squared-relu)
  srelu.model.activation = Activation::squared_relu;
  EXPECT_NE(megatron_arguments(srelu).find("--squared-relu"), std::string::npos);
  EXPECT_EQ(megatron_arguments(srelu).find("--swiglu"), std::string::npos);
  EXPECT_EQ(parse_plan_json(to_json(srelu).dump(), "plan.json").model.activation, Activation::squared_relu);
  // Megatron-Core's fused cross-entropy: the flag and its implementation; plan.json keeps it.
  ExecutablePlan ce = p;
  EXPECT_EQ(megatron_arguments(ce).find("--cross-entropy-loss-fusion"), std::string::npos);
  ce.plan.framework = Framework::megatron_core;
  ce.plan.cross_entropy_fusion = CrossEntropyFusion::te;
  EXPECT_NE(megatron_arguments(ce).find("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te"), std::string::npos);
  EXPECT_EQ(parse_plan_json(to_json(ce).dump(), "plan.json").plan.cross_entropy_fusion, CrossEntropyFusion::te);
  ExecutablePlan bf16_state = p;  // NeMo's distributed Adam state: no Megatron-LM flags, survives plan.json
  bf16_state.training.dtype = Dtype::bf16;
  bf16_state.training.optimizer_state_dtype = Dtype::bf16;
  EXPECT_TRUE(megatron_arguments(bf16_state).empty());
  EXPECT_EQ(parse_plan_json(to_json(bf16_state).dump(), "plan.json").training.optimizer_state_dtype, Dtype::bf16);
  ExecutablePlan sgd = p;
  sgd.training.optimizer = Optimizer::sgd;
  EXPECT_NE(megatron_arguments(sgd).find("--optimizer sgd"), std::string::npos);
  EXPECT_NE(args.find("--recompute-method uniform --recompute-num-layers 1"), std::string::npos);
  ExecutablePlan b = p;
  b.plan.recompute_layers = 1;  // block: the first layer of each 2-layer stage
  EXPECT_NE(megatron_arguments(b).find("--recompute-granularity full --recompute-method block --recompute-num-layers 1"),
            std::string::npos);
  // Block recompute and a DeepSpeed partition survive the plan.json round trip.
  EXPECT_EQ(parse_plan_json(to_json(b).dump(), "plan.json").plan.recompute_layers, 1);
  ExecutablePlan d = p;
  d.plan.framework = Framework::deepspeed;
  d.plan.partition_method = "type:transformer";
  EXPECT_EQ(parse_plan_json(to_json(d).dump(), "plan.json").plan.partition_method, "type:transformer");
  // Megatron-Core's per-module recompute (on the selective granularity, whose own module is
  // core_attn) and multi-token prediction; both survive the round trip.
  ExecutablePlan m = p;
  m.plan.framework = Framework::megatron_core;
  m.plan.recompute = Recompute::none;
  m.plan.recompute_modules.layernorm = m.plan.recompute_modules.moe_act = true;
  m.model.mtp_layers = 1;
  const std::string margs = megatron_arguments(m);
  EXPECT_NE(margs.find("--recompute-granularity selective --recompute-modules layernorm moe_act"), std::string::npos) << margs;
  EXPECT_NE(margs.find("--mtp-num-layers 1"), std::string::npos) << margs;
  m.plan.recompute = Recompute::selective;
  EXPECT_NE(megatron_arguments(m).find("--recompute-modules core_attn layernorm moe_act"), std::string::npos);
  ExecutablePlan whole = m;
  whole.plan.recompute_modules = {.mlp = true, .moe = true, .shared_experts = true};
  EXPECT_NE(megatron_arguments(whole).find("--recompute-modules core_attn mlp moe shared_experts"), std::string::npos)
      << megatron_arguments(whole);
  // A split per stage or chunk, as Megatron-Core's explicit layout: a last chunk of the MTP module
  // and the loss alone ("...|mL"); interleaved chunks in model order. Megatron-LM (2021) has no
  // such flag: no arguments.
  ExecutablePlan ml = m;
  ml.plan.stage_layers = {ml.model.layers, 0};
  const std::string layout = "--pipeline-model-parallel-layout \"E" + std::string(std::size_t(ml.model.layers), 't') + "|mL\"";
  EXPECT_NE(megatron_arguments(ml).find(layout), std::string::npos) << megatron_arguments(ml);
  EXPECT_EQ(megatron_arguments(ml).find("--decoder-last-pipeline-num-layers"), std::string::npos);
  ExecutablePlan iv = m;
  iv.model.mtp_layers = 0;
  iv.plan.schedule = Schedule::interleaved;
  iv.plan.virtual_stages = 2;
  iv.plan.stage_layers = {1, 1, 1, ml.model.layers - 3};
  const std::string ivargs = megatron_arguments(iv);
  EXPECT_NE(ivargs.find("--pipeline-model-parallel-layout \"Et|t|t|" + std::string(std::size_t(ml.model.layers - 3), 't') + "L\""),
            std::string::npos) << ivargs;
  EXPECT_EQ(ivargs.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  iv.plan.framework = Framework::megatron;
  EXPECT_TRUE(megatron_arguments(iv).empty());
  m.plan.recompute_modules.moe_act = false;  // the sample model has no MoE layer (check_plan)
  const ExecutablePlan back = parse_plan_json(to_json(m).dump(), "plan.json");
  EXPECT_TRUE(back.plan.recompute_modules.layernorm);
  EXPECT_EQ(back.model.mtp_layers, 1);
}

// Integer fields take whole numbers however written (DeepSpeed configs write 5e8): 2.0 and 2e0 are
// 2, 8.5 is refused naming the field.
TEST(PlanJson, IntegersMayBeWrittenAsWholeFloats) {
  auto j = to_json(sample());
  j["plan"]["micro_batch"] = 2.0;
  // Exponent notation in the text itself (dump() would write a double as 2.0).
  std::string text = j.dump();
  const std::string dp = "\"dp\":2";
  ASSERT_NE(text.find(dp), std::string::npos);
  text.replace(text.find(dp), dp.size(), "\"dp\":2e0");
  const ExecutablePlan q = parse_plan_json(text, "plan.json");
  EXPECT_EQ(q.plan.micro_batch, 2);
  EXPECT_EQ(q.plan.dp, 2);
  j["plan"]["micro_batch"] = 2.5;
  expect_refused(j.dump(), "plan.micro_batch");
  j["plan"]["micro_batch"] = 1e300;
  try {
    parse_plan_json(j.dump(), "plan.json");
    ADD_FAILURE() << "accepted 1e300";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "plan.micro_batch");
    EXPECT_EQ(e.rule(), "must be at most 2147483647");
  }
}

TEST(PlanJson, MegatronCoreOffloadAndOptimizerInstancesReachTheLaunchLine) {
  // --optimizer-cpu-offload needs --use-precision-aware-optimizer beside it (core_v0.12+
  // arguments.py asserts it); activation offload is TransformerConfig.cpu_offloading, whose layer
  // count is --cpu-offloading-num-layers from core_v0.16.0 on; HSDP-style groups of the
  // distributed optimizer are --num-distributed-optimizer-instances, dp / shard_group of them.
  ExecutablePlan p = megatron_core_flat(8, 1);
  p.plan.offload.optimizer = true;
  const std::string args = megatron_arguments(p);
  EXPECT_NE(args.find("--use-distributed-optimizer"), std::string::npos) << args;
  EXPECT_NE(args.find("--optimizer-cpu-offload --use-precision-aware-optimizer"), std::string::npos) << args;
  EXPECT_EQ(args.find("--num-distributed-optimizer-instances"), std::string::npos) << args;
  ExecutablePlan groups = p;
  groups.plan.shard_group = 2;
  EXPECT_NE(megatron_arguments(groups).find("--num-distributed-optimizer-instances 4"), std::string::npos)
      << megatron_arguments(groups);
  ExecutablePlan acts = p;
  acts.plan.offload.optimizer = false;
  acts.plan.offload.activations = 0.5;
  EXPECT_NE(megatron_arguments(acts).find("--cpu-offloading-num-layers " + std::to_string(acts.model.layers / 2)),
            std::string::npos)
      << megatron_arguments(acts);
  ExecutablePlan old_acts = acts;
  old_acts.plan.framework = Framework::megatron;
  old_acts.plan.zero = 0;
  expect_no_megatron_arguments(old_acts, "activation offload");
  // Megatron-LM 2021-22 has no optimizer instances: the same groups have no flag there.
  groups.plan.framework = Framework::megatron;
  groups.plan.offload.optimizer = false;
  expect_no_megatron_arguments(groups, "plan.shard_group");
}

TEST(PlanJson, DeepSpeedPlansCarryTheConfigDeepSpeedReads) {
  // A DeepSpeed pipeline plan: tp 2, pp 2, dp 2, micro-batch 2, global batch 16, ZeRO-1 with the
  // optimizer and the checkpoints on the host, bf16. DeepSpeed asserts train_batch_size =
  // micro-batch x gradient_accumulation_steps x data-parallel ranks (runtime/config.py
  // _batch_assertion): 16 = 2 x 4 x 2.
  ExecutablePlan p = sample();
  p.training.dtype = Dtype::bf16;
  p.plan.framework = Framework::deepspeed;
  p.plan.offload.optimizer = true;
  p.plan.offload.activations = 1.0;
  const nlohmann::ordered_json c = deepspeed_config(p);
  ASSERT_FALSE(c.is_null());
  EXPECT_EQ(c["train_batch_size"], 16);
  EXPECT_EQ(c["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(c["gradient_accumulation_steps"], 4);
  EXPECT_EQ(c["bfloat16"]["enabled"], true);
  EXPECT_FALSE(c.contains("fp16"));
  const auto& z = c["zero_optimization"];
  EXPECT_EQ(z["stage"], 1);
  EXPECT_EQ(z["reduce_bucket_size"], 500000000);  // DeepSpeed's default reduce_bucket_size, 5e8
  EXPECT_EQ(z["overlap_comm"], false);            // the pipeline engine forces it off
  EXPECT_EQ(z["offload_optimizer"]["device"], "cpu");
  EXPECT_FALSE(z.contains("stage3_max_reuse_distance"));
  EXPECT_EQ(c["activation_checkpointing"]["cpu_checkpointing"], true);
  EXPECT_EQ(c["activation_checkpointing"]["partition_activations"], false);
  // BF16_Optimizer (plan.bf16_optimizer): DeepSpeed builds it for bf16 at ZeRO stage 0, where it
  // shards the fp32 state itself (the plan's zero 1); no ZeRO bucket then.
  ExecutablePlan b = p;
  b.plan.offload.optimizer = false;
  b.plan.bf16_optimizer = true;
  const nlohmann::ordered_json cb = deepspeed_config(b);
  EXPECT_EQ(cb["zero_optimization"]["stage"], 0);
  EXPECT_FALSE(cb["zero_optimization"].contains("reduce_bucket_size"));
  EXPECT_EQ(cb["bfloat16"]["enabled"], true);

  // ZeRO-3 as the Azure runs set it: reduce_bucket_size 9e7, fp16 with dynamic loss scaling, the
  // stage-3 defaults the simulator assumes (runtime/zero/config.py: persistence 1e5, reuse 1e9),
  // and no overlap_comm key (DeepSpeed's own default stays).
  ExecutablePlan z3 = sample();
  z3.training.dtype = Dtype::fp16;
  z3.plan.framework = Framework::deepspeed;
  z3.plan.tp = z3.plan.pp = 1;
  z3.plan.dp = 8;
  z3.plan.zero = 3;
  z3.plan.reduce_bucket = 90000000;
  z3.plan.recompute = Recompute::none;
  const nlohmann::ordered_json c3 = deepspeed_config(z3);
  ASSERT_FALSE(c3.is_null());
  EXPECT_EQ(c3["gradient_accumulation_steps"], 1);  // 16 = 2 x 1 x 8
  EXPECT_EQ(c3["fp16"]["loss_scale"], 0);
  EXPECT_EQ(c3["zero_optimization"]["reduce_bucket_size"], 90000000);
  EXPECT_EQ(c3["zero_optimization"]["stage3_param_persistence_threshold"], 100000);
  EXPECT_EQ(c3["zero_optimization"]["stage3_max_reuse_distance"], 1000000000);
  EXPECT_FALSE(c3["zero_optimization"].contains("overlap_comm"));
  EXPECT_FALSE(c3["zero_optimization"].contains("offload_optimizer"));
  EXPECT_FALSE(c3.contains("activation_checkpointing"));
  // Ulysses (cp 4 over the 8 ranks, dp 2): the sequence ranks hold parts of the same sequences, so
  // the batch's world is dp: 16 = 2 x 4 x 2.
  ExecutablePlan sp = z3;
  sp.plan.cp = 4;
  sp.plan.dp = 2;
  sp.plan.cp_comm = CpComm::all_to_all;
  EXPECT_EQ(deepspeed_config(sp)["gradient_accumulation_steps"], 4);

  // None for another framework, for FP8, or for part of the checkpoints on the host.
  std::string why;
  EXPECT_TRUE(deepspeed_config(sample(), &why).is_null());
  EXPECT_NE(why.find("framework deepspeed"), std::string::npos) << why;
  ExecutablePlan fp8 = p;
  fp8.training.dtype = Dtype::fp8;
  EXPECT_TRUE(deepspeed_config(fp8, &why).is_null());
  EXPECT_NE(why.find("fp8"), std::string::npos) << why;
  ExecutablePlan half = p;
  half.plan.offload.activations = 0.5;
  EXPECT_TRUE(deepspeed_config(half, &why).is_null());
  EXPECT_NE(why.find("cpu_checkpointing"), std::string::npos) << why;
}

TEST(PlanJson, FmsFsdpPlansGetItsOwnLaunchLine) {
  // The fms-fsdp 13B row as its README ran it: Llama 2 13B (ibm-fms variant llama2_13b), FSDP over
  // 128 GPUs of 16 nodes, half the 40 blocks checkpointed (selective_checkpointing 1/2), batch 2
  // of 4096, eager. The flags are main_training_llama.py's config fields (fms_fsdp/config/training.py).
  ExecutablePlan p;
  p.model = ModelSpec{.name = "llama2-13b", .layers = 40, .hidden = 5120, .heads = 40, .seq_len = 4096,
                      .vocab = 32000, .ffn_hidden = 13824, .kv_heads = 40, .moe = std::nullopt};
  p.model.activation = Activation::swiglu;
  p.model.norm = Norm::rmsnorm;
  p.model.position = PositionEmbedding::rope;
  p.gpus_per_node = 8;
  p.gpus = 128;
  p.training = TrainingSpec{.global_batch = 256, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
  p.plan.framework = Framework::fms_fsdp;
  p.plan.dp = 128;
  p.plan.micro_batch = 2;
  p.plan.zero = 3;
  p.plan.recompute = Recompute::full;
  p.plan.recompute_layers = 20;
  EXPECT_EQ(fms_fsdp_arguments(p),
            "torchrun --nnodes=16 --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=12234 "
            "--nproc_per_node=8 main_training_llama.py --model_variant=llama2_13b "
            "--sharding_strategy=fsdp --fsdp_activation_checkpointing=True --selective_checkpointing=1/2 "
            "--mixed_precision=True --batch_size=2 --seq_length=4096 --vocab_size=32000 --use_torch_compile=False");
  // HSDP over each node, every block checkpointed, compiled.
  p.plan.shard_group = 8;
  p.plan.recompute_layers = 0;
  p.plan.compile = true;
  const std::string hsdp = fms_fsdp_arguments(p);
  EXPECT_NE(hsdp.find("--sharding_strategy=hsdp"), std::string::npos) << hsdp;
  EXPECT_NE(hsdp.find("--selective_checkpointing=1 "), std::string::npos) << hsdp;
  EXPECT_NE(hsdp.find("--use_torch_compile=True"), std::string::npos) << hsdp;
  // No checkpointing: no share.
  p.plan.recompute = Recompute::none;
  EXPECT_EQ(fms_fsdp_arguments(p).find("selective_checkpointing"), std::string::npos);
  // A model no variant has (GPT-style GeLU blocks), and another framework's plan: empty, saying why.
  std::string why;
  ExecutablePlan gpt = p;
  gpt.model.activation = Activation::gelu;
  EXPECT_EQ(fms_fsdp_arguments(gpt, &why), "");
  EXPECT_NE(why.find("none has model llama2-13b's shapes"), std::string::npos) << why;
  ExecutablePlan tt = p;
  tt.plan.framework = Framework::torchtitan;
  EXPECT_EQ(fms_fsdp_arguments(tt, &why), "");
  EXPECT_NE(why.find("torchtitan"), std::string::npos) << why;
  // fp32 training turns mixed precision off; fp16, FP8 or a wider reduction have no flag.
  ExecutablePlan fp32 = p;
  fp32.training.dtype = Dtype::fp32;
  EXPECT_NE(fms_fsdp_arguments(fp32).find("--mixed_precision=False"), std::string::npos);
  ExecutablePlan fp16 = p;
  fp16.training.dtype = Dtype::fp16;
  EXPECT_EQ(fms_fsdp_arguments(fp16, &why), "");
  EXPECT_NE(why.find("fp16 has none"), std::string::npos) << why;
  ExecutablePlan wide = p;
  wide.plan.reduce_dtype = Dtype::fp32;
  EXPECT_EQ(fms_fsdp_arguments(wide, &why), "");
  EXPECT_NE(why.find("reduce_dtype fp32"), std::string::npos) << why;
  // One node: no rendezvous flags.
  ExecutablePlan one = p;
  one.gpus = 8;
  one.plan.dp = 8;
  EXPECT_EQ(fms_fsdp_arguments(one).rfind("torchrun --nnodes=1 --nproc_per_node=8 main_training_llama.py ", 0), 0u)
      << fms_fsdp_arguments(one);
  // Llama 3 8B at 4096 tokens takes the 4k variant, at 8192 the other.
  ExecutablePlan l3 = p;
  l3.model.name = "llama3-8b";
  l3.model.layers = 32;
  l3.model.hidden = 4096;
  l3.model.heads = 32;
  l3.model.kv_heads = 8;
  l3.model.ffn_hidden = 14336;
  l3.model.vocab = 128256;
  EXPECT_NE(fms_fsdp_arguments(l3).find("--model_variant=llama3_8b_4k "), std::string::npos);
  l3.model.seq_len = 8192;
  EXPECT_NE(fms_fsdp_arguments(l3).find("--model_variant=llama3_8b "), std::string::npos);
}

TEST(PlanJson, DeferredHeadWeightGradientsTravelAndReachTheLaunchLine) {
  // plan.defer_embedding_wgrad and its limit survive plan.json and become Megatron-Core's
  // --defer-embedding-wgrad-compute --wgrad-deferral-limit N; off, neither flag appears.
  ExecutablePlan p = megatron_core_flat(2, 1);
  p.plan.pp = 2;
  p.plan.dp = p.gpus / 4;
  EXPECT_EQ(megatron_arguments(p).find("defer-embedding"), std::string::npos) << megatron_arguments(p);
  p.plan.defer_embedding_wgrad = true;
  p.plan.wgrad_deferral_limit = 22;
  const ExecutablePlan q = parse_plan_json(to_json(p).dump(), "plan.json");
  EXPECT_TRUE(q.plan.defer_embedding_wgrad);
  EXPECT_EQ(q.plan.wgrad_deferral_limit, 22);
  EXPECT_NE(megatron_arguments(q).find("--defer-embedding-wgrad-compute --wgrad-deferral-limit 22"), std::string::npos)
      << megatron_arguments(q);
}
