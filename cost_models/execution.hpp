// The execution model of one experiment: how its plan is run, resolved once (at the command line
// or the planner's entry) and passed to every cost model. It holds the framework's entry
// (core/framework.hpp), the attention kernel both compute and memory price, how MoE tokens move,
// the element sizes of the precision recipe, the memory model's buffer options, and the compute
// model of the GPU with the part of its calibration profile that matches the implementations and
// dtype this execution runs (the profile file is read once per process). Nothing downstream asks
// which framework it is: it reads these fields.
#pragma once

#include <memory>
#include <string>

#include "core/enums.hpp"
#include "core/framework.hpp"
#include "core/hardware.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "cost_models/calibrated.hpp"
#include "cost_models/device_spread.hpp"
#include "cost_models/precision.hpp"

namespace foresight {
struct Experiment;
}

namespace foresight::cost_models {

class RooflineCompute;
class HostOps;
struct ProfileData;

/// Memory that is neither model state nor activations. The defaults are estimates with their
/// source; a calibration profile may replace them.
struct MemoryOptions {
  /// CUDA context, cuBLAS/cuDNN workspaces and the framework's own allocations: nvidia-smi minus
  /// torch.cuda.memory_reserved() is typically 0.3-0.6 GiB on A100/H100 (an estimate).
  Bytes cuda_context = Bytes(512.0 * 1048576.0);
  /// One NCCL communicator's staging buffers: NCCL_BUFFSIZE (default 4 MiB, NCCL environment
  /// variable docs) per channel and peer, times 2 ring peers times 8 channels (an estimate; the
  /// channel count NCCL picks depends on the topology).
  Bytes nccl_per_communicator = Bytes(4.0 * 1048576.0 * 2 * 8);
  /// Caching-allocator fragmentation, as a fraction of everything allocated. ZeRO (Rajbhandari et
  /// al. 2020, sec. 3.2) reports OOM with over 30% of memory free in extreme cases; Korthikanti
  /// sec. 7 names fragmentation as open work. 5% is our default for steady-state training.
  double allocator_fragmentation = 0.05;
};

/// What the calibration profile contributed to an execution, for the record.
struct ProfileUse {
  std::string file;               // "" when the GPU has no bundled profile
  int gemm_samples = 0;           // GEMMs measured with this execution's implementation and dtype
  bool attention = false;         // attention measured with this execution's implementation
  bool streaming = false;         // copy bandwidth and launch overhead
  std::string describe() const;   // one line, for --help-like output and reports
};

struct ExecutionModel {
  const FrameworkTraits* framework = nullptr;  // never null once resolved
  /// The elementwise kernels' traffic: the framework's eager entry, or its compiled one under
  /// plan.compile. Never null once resolved.
  const ElementwiseTraffic* elementwise = nullptr;
  AttentionImpl attention = AttentionImpl::unfused;
  /// Unfused attention whose softmax runs as PyTorch ops instead of Megatron's fused kernel
  /// (plan.fused_softmax false, FrameworkTraits::fused_softmax).
  bool softmax_fallback = false;
  MoeDispatch moe_dispatch = MoeDispatch::permute;
  std::string gemm_impl = "cublaslt";  // the GEMM library every supported framework runs
  Dtype dtype = Dtype::bf16;           // training dtype (GEMMs)
  Dtype attention_dtype = Dtype::bf16; // fp8 recipes keep attention in bf16
  Fp8Scaling fp8_scaling = Fp8Scaling::delayed;  // with dtype fp8: how inputs are scaled
  ElementSizes bytes;
  MemoryOptions memory;
  /// Kernel times on the experiment's GPU; null for a memory-only model (execution_model()).
  std::shared_ptr<const RooflineCompute> compute;
  /// FP8 training: the 16-bit compute model for what the recipe keeps in bf16 (the LM head:
  /// Megatron-Core and Transformer Engine apply FP8 to the transformer layers' linears only).
  /// Otherwise the same model as `compute`.
  std::shared_ptr<const RooflineCompute> compute16;
  ProfileUse profile;
  /// A CPU device (GpuSpec::host_profile): the trainer's CPU backend ops as measured on the host,
  /// for this plan's rank count. When set, layers, the embedding and head and the optimizer step
  /// are priced from it (layer_times, edge_times, optimizer_time) rather than from the roofline.
  std::shared_ptr<const HostOps> host;
  /// Calibrated parameters whose scope this execution falls in (scenarios/calibration.yaml).
  CalibratedTerms calibrated;
  /// The slowest of the plan's GPUs: its GEMM and attention kernels pace every synchronous step
  /// (already applied to `compute` and `compute16`).
  SlowestDevice slowest;

  const RooflineCompute& roofline() const;  // the compute model; an invariant failure when absent
  const RooflineCompute& roofline16() const { return compute16 ? *compute16 : roofline(); }
};

/// The execution of a plan trained as `training` says, without a compute model (enough for the
/// memory model): plan.framework's entry, plan.attention or the attention kernel the framework
/// runs (on `gpu`'s generation, when given), element sizes for the dtype and optimizer.
ExecutionModel execution_model(const TrainingSpec& training, const PlanSpec& plan, const GpuSpec* gpu = nullptr);

/// Whether the forward's sequence-parallel all-gathers carry the column-parallel linears' inputs
/// already cast to FP8: FrameworkTraits::fp8_tensorwise_tp_gather under FP8 training with
/// tensorwise scales, tp > 1 with sequence parallelism. The gathers then move one byte per element
/// (sim/costing.cpp) and the inputs are cast on their 1/tp shard (cost_models/roofline.cpp).
bool fp8_sequence_parallel_gathers(const ExecutionModel& x, const PlanSpec& plan);

/// Whether Transformer Engine gathers its sequence-parallel operands in FP8, both ways: FP8 training
/// with TE's linears (FrameworkTraits::fp8_transformer_engine), tp > 1 with sequence parallelism.
/// Forward, LayerNormLinear quantizes its norm output on the sequence shard and all-gathers the FP8
/// bytes (TE v1.8 module/layernorm_linear.py: ln_out allocated as uint8 under fp8 without
/// return_layernorm_output, which Megatron-Core's TELayerNormColumnParallelLinear does not ask for;
/// gather_along_first_dim); backward, the row-parallel linears' output gradient is cast on its
/// shard and gathered in FP8 (module/base.py grad_output_preprocess, "FP8 case with gather"); TE
/// 2.x gathers current-scaled tensors in FP8 as well (distributed.py _all_gather_fp8). The
/// reduce-scatters stay 16-bit.
bool te_fp8_sequence_parallel_gathers(const ExecutionModel& x, const PlanSpec& plan);

/// The whole execution model of a plan on a cluster's GPU: execution_model() plus the compute
/// model from the GPU's sourced kernel figures and the matching part of its bundled calibration
/// profile (scenarios/profiles/<gpu name>.json, read once per process). A fused attention kernel
/// the GPU file has no figure for and the profile did not measure is a SpecError naming the field.
/// The calibrated parameters are the bundled ones (bundled_calibration()) unless `calibration`
/// is given (the fit tries its candidates through it).
ExecutionModel resolve_execution(const ClusterSpec& cluster, const TrainingSpec& training, const PlanSpec& plan,
                                 const CalibrationSet* calibration = nullptr);
ExecutionModel resolve_execution(const Experiment& e, const CalibrationSet* calibration = nullptr);

/// The bundled calibration profile of a GPU (by its scenario name), parsed once per process and
/// shared; null when there is none.
std::shared_ptr<const ProfileData> bundled_profile(const std::string& gpu_name);

}  // namespace foresight::cost_models
