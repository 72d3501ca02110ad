#include "cost_models/execution.hpp"

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "core/experiment.hpp"
#include "core/scenario.hpp"
#include "cost_models/host_profile.hpp"
#include "cost_models/profile.hpp"
#include "cost_models/roofline.hpp"

namespace foresight::cost_models {

std::string ProfileUse::describe() const {
  if (file.empty()) return "no calibration profile for this GPU: kernel figures from the GPU file";
  std::string s = file + ": ";
  s += gemm_samples > 0 ? std::to_string(gemm_samples) + " GEMM shapes" : "no GEMMs of this implementation and dtype";
  s += attention ? ", attention" : ", no attention of this implementation";
  if (streaming) s += ", copy bandwidth and launch overhead";
  return s;
}

const RooflineCompute& ExecutionModel::roofline() const {
  FORESIGHT_CHECK(compute) << "the execution model was resolved without a compute model (execution_model())";
  return *compute;
}

bool fp8_sequence_parallel_gathers(const ExecutionModel& x, const PlanSpec& plan) {
  return x.framework->fp8_tensorwise_tp_gather && x.dtype == Dtype::fp8 && x.fp8_scaling == Fp8Scaling::tensorwise &&
         plan.sequence_parallel && plan.tp > 1;
}

bool te_fp8_sequence_parallel_gathers(const ExecutionModel& x, const PlanSpec& plan) {
  return x.framework->fp8_transformer_engine && x.dtype == Dtype::fp8 &&
         (x.fp8_scaling == Fp8Scaling::delayed || x.fp8_scaling == Fp8Scaling::tensorwise) && plan.sequence_parallel &&
         plan.tp > 1;
}

ExecutionModel execution_model(const TrainingSpec& training, const PlanSpec& plan, const GpuSpec* gpu) {
  const FrameworkTraits& fw = framework_traits(plan.framework);
  ExecutionModel x;
  x.framework = &fw;
  // A framework without a compiled mode has been refused at plan.compile by check_plan.
  x.elementwise = plan.compile && fw.compiled_elementwise ? &*fw.compiled_elementwise : &fw.elementwise;
  const bool newer = gpu && fw.newer_attention_from_cc > 0 && gpu->compute_capability >= fw.newer_attention_from_cc;
  x.attention = plan.attention.value_or(newer ? fw.newer_attention : fw.attention);
  x.softmax_fallback = fw.fused_softmax && x.attention == AttentionImpl::unfused && !plan.fused_softmax.value_or(true);
  x.moe_dispatch = fw.moe_dispatch;
  x.dtype = training.dtype;
  x.attention_dtype = training.dtype == Dtype::fp8 ? Dtype::bf16 : training.dtype;
  x.fp8_scaling = training.fp8_scaling;
  x.bytes = element_sizes(training.dtype, training.optimizer, fw, training.optimizer_state_dtype,
                          training.dtype == Dtype::fp8 && plan.fp8_param_gather, plan.bf16_optimizer,
                          plan.optimizer_impl.value_or(OptimizerImpl::fused));
  if (plan.reduce_dtype) x.bytes.reduce = *plan.reduce_dtype == Dtype::fp32 ? 4.0 : 2.0;  // fp32 | bf16 | fp16
  if (plan.reduce_dtype && fw.precision.fp32_main_grads && x.bytes.weight < 4.0) {
    // Megatron's main-gradient buffer is what data parallelism reduces, in place: its dtype is the
    // reduce dtype (Megatron-LM --accumulate-allreduce-grads-in-fp32, Megatron-Core's
    // grad_reduce_in_fp32, NeMo's distributed Adam grad_sync_dtype). A 16-bit buffer holds 16-bit
    // gradients, accumulates them in place (read 2 + 2, write 2) and feeds the optimizer 2 bytes.
    x.bytes.optimizer_step += x.bytes.reduce - x.bytes.grad;
    x.bytes.grad = x.bytes.reduce;
    x.bytes.accumulate = x.bytes.reduce < 4.0 ? 3.0 * x.bytes.grad : x.bytes.accumulate;
  }
  // The weight-gradient GEMMs add into the fp32 main gradients themselves (their epilogue reads
  // and writes the buffer): no accumulation pass per micro-batch.
  if (fw.precision.fp32_main_grads && fw.fuses_gradient_accumulation(plan))
    x.bytes.accumulate = 0.0;
  return x;
}

std::shared_ptr<const ProfileData> bundled_profile(const std::string& gpu_name) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ProfileData>> cache;
  const std::filesystem::path path = std::filesystem::path(scenarios_dir()) / "profiles" / (gpu_name + ".json");
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path.string());
  if (it != cache.end()) return it->second;
  std::shared_ptr<const ProfileData> p;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) p = std::make_shared<const ProfileData>(load_profile(path.string()));
  cache.emplace(path.string(), p);
  return p;
}

ExecutionModel resolve_execution(const ClusterSpec& cluster, const TrainingSpec& training, const PlanSpec& plan,
                                 const CalibrationSet* calibration) {
  const GpuSpec& gpu = cluster.gpu;
  ExecutionModel x = execution_model(training, plan, &gpu);
  x.calibrated = calibrated_terms(calibration ? *calibration : bundled_calibration(), cluster, training, plan);
  bool has_attention_figure = false;
  auto rc = std::make_shared<RooflineCompute>(gpu, training.dtype, roofline_params_for(gpu, x.attention, &has_attention_figure));
  std::optional<CalibrationProfile> selected16;  // the profile's bf16 part, for FP8 training
  if (!gpu.host_profile.empty()) {
    // A CPU device: its ops come from the host profile; the roofline (the profile's best GEMM
    // rate and copy bandwidth, in the device's GpuSpec) remains for what no host op describes.
    x.host = std::make_shared<const HostOps>(cached_host_profile(gpu.host_profile), plan.gpus());
    x.profile.file = gpu.host_profile;
    has_attention_figure = true;
  } else if (const auto data = bundled_profile(gpu.name)) {
    const CalibrationProfile selected =
        select_profile(*data, x.gemm_impl, x.dtype, to_string(x.attention), x.attention_dtype);
    x.profile.file = data->source;
    x.profile.gemm_samples = int(selected.gemm.size());
    x.profile.attention = selected.attention_efficiency.has_value();
    x.profile.streaming = selected.copy_GBps.has_value() || selected.launch_overhead_us.has_value();
    has_attention_figure = has_attention_figure || x.profile.attention;
    rc->use_profile(selected);
    // FP8's 16-bit part (compute16, below) and, without FP8 GEMM samples, its GEMMs' anchor.
    if (x.dtype == Dtype::fp8) {
      selected16 = select_profile(*data, x.gemm_impl, Dtype::bf16, to_string(x.attention), x.attention_dtype);
      if (selected.gemm.empty()) rc->anchor_to_bf16_profile(*selected16);
    }
  }
  if (!has_attention_figure)
    throw SpecError(SourceLocation{"scenarios/gpus/" + gpu.name + ".yaml", 0, 0},
                    std::string("gpu.kernels.") + to_string(x.attention) + "_attention_efficiency", "",
                    "is needed: " + x.framework->describe() + " runs " + to_string(x.attention) + " attention on " +
                        gpu.name + ", and neither the GPU file nor a calibration profile gives its speed");
  // Calibrated scales on top of the GPU file's or the profile's kernel figures.
  // The FP8-only scale acts on the FP8 GEMMs, not on what the recipe keeps in 16 bits (compute16).
  // The step runs at its slowest GPU's tensor-core speed (cost_models/device_spread.hpp); a CPU
  // device's ranks share one host and have no spread.
  if (!x.host) x.slowest = slowest_device(gpu, plan.gpus(), training.burst_clocks);
  const double pace = x.slowest.sustained / x.slowest.factor;
  const double fp8_gemm = training.dtype == Dtype::fp8 ? x.calibrated.fp8_gemm_efficiency_scale : 1.0;
  rc->apply_calibrated_scales(x.calibrated.gemm_efficiency_scale * fp8_gemm * pace,
                              x.calibrated.attention_efficiency_scale * pace);
  x.compute = std::move(rc);
  x.compute16 = x.compute;
  if (training.dtype == Dtype::fp8) {
    auto rc16 = std::make_shared<RooflineCompute>(gpu, Dtype::bf16, roofline_params_for(gpu, x.attention, nullptr));
    if (selected16) rc16->use_profile(std::move(*selected16));
    rc16->apply_calibrated_scales(x.calibrated.gemm_efficiency_scale * pace, x.calibrated.attention_efficiency_scale * pace);
    x.compute16 = std::move(rc16);
  }
  return x;
}

ExecutionModel resolve_execution(const Experiment& e, const CalibrationSet* calibration) {
  return resolve_execution(e.cluster, e.training, e.plan, calibration);
}

}  // namespace foresight::cost_models
