// GPUs, nodes and the network between them, as the scenario files describe them. Bandwidths are
// per direction unless the name says otherwise; each GPU file cites where its numbers come from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/units.hpp"

namespace foresight {

/// A kernel-level figure with where it was measured or read.
struct SourcedValue {
  double value = 0;
  std::string source;
};

/// What kernels achieve on a GPU, each from a kernel-level measurement or a published kernel
/// benchmark with its source, never from an end-to-end training result. Efficiencies are
/// fractions of a peak, in (0, 1]. The compute model (cost_models/roofline.hpp) starts from these;
/// a calibration profile replaces them where it measured the same implementation.
struct GpuKernelFigures {
  SourcedValue gemm_efficiency;    // of the dtype's dense peak: a large cuBLAS GEMM's best (the roofline's ceiling)
  SourcedValue memory_efficiency;  // of peak HBM bandwidth: a large streaming copy
  SourcedValue launch_overhead_us; // device-side cost of one queued kernel launch, microseconds
  // Fused attention forward + backward (backward = 2.5 forwards of FLOPs), of the dense peak;
  // unset where the GPU has no such kernel or no figure: a plan that needs it is refused.
  std::optional<SourcedValue> flash_attention_efficiency;
  std::optional<SourcedValue> cudnn_attention_efficiency;
  // FlashAttention-2's own figure where the flash figure above measured a newer kernel (GH100:
  // PyTorch 2.11's SDPA); unset: the flash figure is FlashAttention-2's (A100) or none is known.
  std::optional<SourcedValue> flash2_attention_efficiency;
  // FlashAttention's Triton kernel (flash_attn/flash_attn_triton.py, MPT's attn_impl triton);
  // unset: the flash figure stands in for it, scaled where a calibrated parameter says so.
  /// The original FlashAttention CUDA kernel (flash-attn 1.x), forward + backward, causal, head dim
  /// 128, sequence 2k, as flash2_attention_efficiency; its shape curve is
  /// cost_models/roofline.cpp flash1_attention_shape_factor.
  std::optional<SourcedValue> flash1_attention_efficiency;
  std::optional<SourcedValue> flash_triton_attention_efficiency;
  // Of peak HBM bandwidth, the rate at which unfused attention moves its (b, heads, s, s) score
  // matrices; unset: the streaming figure.
  std::optional<SourcedValue> unfused_score_efficiency;
  // Of peak HBM bandwidth, the rate at which PyTorch's eager RMSNorm chain (upcast, pow, mean,
  // rsqrt, multiply, cast back, weight scale; ElementwiseTraffic::norms_eager_chain) moves its
  // bytes, forward and backward; unset: the streaming figure.
  std::optional<SourcedValue> eager_norm_efficiency;
  // Of peak HBM bandwidth, the rate at which PyTorch's eager elementwise kernels move their bytes
  // when an operand is broadcast or strided (TensorIterator's non-vectorized path: the RoPE
  // products with their broadcast frequencies, transpose and GQA-expansion copies;
  // ElementwiseTraffic's *_strided entries); unset: the streaming figure.
  std::optional<SourcedValue> eager_strided_efficiency;
  // Coefficient of variation (sigma / median) of sustained throughput across devices of this SKU:
  // a synchronous step runs at its slowest device's pace (cost_models/device_spread.hpp). Unset:
  // no measurement, every device at the median speed.
  std::optional<SourcedValue> device_spread_cv;
  // Tensor-core throughput the GPU sustains through a long training run at its power limit,
  // relative to the burst figures (profile sweeps, benchmark charts) its other kernel figures are:
  // a soaked GEMM at the clock the power cap leaves. Unset: no soak measured, burst figures stand.
  // A run declared short (training.burst_clocks) keeps the burst figures.
  std::optional<SourcedValue> sustained_clock_scale;
  // A GEMM's fixed work per output tile (filling the kernel's shared-memory pipeline before the
  // first multiply-accumulate, the epilogue writing the tile after the last), in elements of the
  // reduction dimension K at the bf16 rate: a tile of a K-long GEMM takes as long as one of
  // K + this with no such cost. Unset: not measured for this GPU, no such term.
  std::optional<SourcedValue> gemm_k_overhead;
  // How many output tiles the GEMM library is taken to choose among per shape: 1, the default
  // 256 x 128 tile only; 3, the fastest of it, its transpose and 128 x 128 (cost_models/roofline.cpp).
  // Unset: 1.
  std::optional<SourcedValue> gemm_tile_candidates;
  // How much longer an FP8 GEMM takes with split accumulation (partial sums promoted to FP32
  // periodically, cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0) than with fast accumulation:
  // the FP8 recipes run their backward (data- and weight-gradient) GEMMs so. Unset: 1.
  std::optional<SourcedValue> fp8_split_accumulation_slowdown;
  // 1: the GEMM library's kernels are persistent, one thread block per SM looping over output
  // tiles (Hopper cuBLAS / CUTLASS 3 warp-specialized kernels). Beside a collective whose thread
  // blocks hold some SMs, the blocks that find no SM wait for a whole block to finish: the GEMM
  // takes about twice as long (sim/costing.cpp overlap_contention). Unset or 0: tiles are
  // scheduled block by block and a collective takes only its share of the SMs.
  std::optional<SourcedValue> persistent_gemm_grid;
};

struct GpuSpec {
  std::string name;
  double compute_capability = 0;        // CUDA compute capability (8.0 A100, 9.0 H100): which kernels a framework picks
  int sms = 0;
  double clock_MHz = 0;                 // boost clock the peaks assume
  Bytes hbm;                            // device memory capacity
  BytesPerSecond hbm_bandwidth;         // peak DRAM bandwidth
  BytesPerSecond nvlink_bandwidth;      // per GPU, per direction (A100: 300 GB/s)
  FlopsPerSecond peak_bf16, peak_fp16, peak_tf32, peak_fp32;  // dense tensor-core peaks
  FlopsPerSecond peak_fp8;  // dense FP8 peak; 0 where the GPU has no FP8 tensor cores (A100, V100)
  GpuKernelFigures kernels;
  std::string source;
  /// A CPU device (the trainer's CPU backend on a host, issue 24): the calibration profile of
  /// `foresight calibrate --backend cpu` that prices every op and every collective inside the
  /// host (cost_models/host_profile.hpp) in place of peaks and kernel figures. Empty for a GPU.
  std::string host_profile{};

  /// Dense peak for a compute dtype (tf32 and fp32 are distinct; fp8 is 0, and refused by
  /// check_plan, where the GPU file gives none).
  FlopsPerSecond peak(Dtype dt) const;
};

struct IntraNodeSpec {
  IntraFabric kind = IntraFabric::nvswitch;
  BytesPerSecond bandwidth;  // per GPU, per direction, through the fabric
  Seconds latency;           // one small message between two GPUs of a node
};

/// One switch layer above the nodes. `nodes` nodes share one switch group of this tier (a leaf
/// group, a pod); the group's links to the tier above carry 1/oversubscription of what the layer
/// below offers them (the usual down:up port ratio), so traffic that leaves a group of tier t sees
/// the product of the oversubscriptions of tiers 0..t. Inside a group, the tiers below decide.
struct NetworkTier {
  int nodes = 1;                  // nodes under one group of this tier
  double oversubscription = 1.0;  // down:up bandwidth ratio of the group's uplinks; 1 = full bisection
};

struct InterNodeSpec {
  int nics_per_node = 0;
  BytesPerSecond nic_bandwidth;   // per NIC, per direction
  Seconds latency;                // one small message between two nodes
  NetworkTopology topology = NetworkTopology::fat_tree;
  /// One-layer form: the fabric core above the leaves; rail-aligned traffic stays on its leaf and
  /// only traffic through the core is divided by it. 1 = full bisection.
  double oversubscription = 1.0;
  /// Multi-tier form, innermost first (Llama 3's 24K cluster: pods of 384 nodes, 1:7 above them).
  /// Empty: the one-layer form above. The file gives one or the other.
  std::vector<NetworkTier> tiers{};

  /// Product of the oversubscriptions a flow between node indices a and b crosses (1 when both
  /// sit in one group of every tier). Groups are consecutive node indices.
  double tier_oversubscription(long long a, long long b) const;
};

struct HostSpec {
  BytesPerSecond pcie_bandwidth;  // host <-> one GPU, per direction, that GPU alone
  Bytes memory;                   // host memory per node
  /// The rate the node's CPUs stream their memory at (STREAM-triad class, all sockets), which an
  /// optimizer stepping on the host is bound by (cost_models::offload_cost). Zero: not stated, and
  /// then a plan cannot offload its optimizer (core/plan.cpp check_plan).
  BytesPerSecond memory_bandwidth;
  /// Host <-> GPU bandwidth of the whole node while all its GPUs move data at once (the CPUs' root
  /// complexes and memory, not the GPUs' links, bound it): one GPU's rate is then this over the
  /// GPUs moving data, at most pcie_bandwidth (cost_models::host_link_bandwidth). Zero: not
  /// stated, and each GPU keeps pcie_bandwidth.
  BytesPerSecond pcie_node_bandwidth{};
};

/// The most GPUs a cluster may have: 2^24, far beyond any machine built, and small enough that GPU
/// counts and products of parallel degrees stay exact in int arithmetic.
inline constexpr int kMaxClusterGpus = 1 << 24;

struct ClusterSpec {
  std::string name;
  int nodes = 0;
  int gpus_per_node = 0;
  GpuSpec gpu;
  IntraNodeSpec intra;
  InterNodeSpec inter;
  HostSpec host;
  std::string source;

  int total_gpus() const { return nodes * gpus_per_node; }  // at most kMaxClusterGpus once loaded
};

}  // namespace foresight
