// Closed sets of the scenario vocabulary as enum classes. Each enum's names are written once, in
// its EnumNames table; to_string, parse and the "allowed values" list of an error all read it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace foresight {

template <class E>
struct EnumNames;  // specialised below: static constexpr std::array<std::pair<E, const char*>, N> kList

#define FORESIGHT_ENUM_NAMES(E, ...)                                   \
  template <>                                                          \
  struct EnumNames<E> {                                                \
    static constexpr auto kList = std::to_array<std::pair<E, const char*>>({__VA_ARGS__}); \
  }

/// Pipeline schedules (sim/schedule.hpp describes each). zb-h1: Qi et al. 2023 (Zero Bubble
/// Pipeline Parallelism), 1F1B with backward split into input-gradient (B) and deferred
/// weight-gradient (W) passes. dualpipe: DeepSeek-V3's bidirectional schedule (DeepSeek-AI 2024,
/// sec. 3.2.1; github deepseek-ai/DualPipe).
enum class Schedule { gpipe, one_f_one_b, interleaved, terapipe, zb_h1, dualpipe };
inline constexpr int kSchedules = 6;
FORESIGHT_ENUM_NAMES(Schedule, {Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"},
                     {Schedule::interleaved, "interleaved"}, {Schedule::terapipe, "terapipe"},
                     {Schedule::zb_h1, "zb-h1"}, {Schedule::dualpipe, "dualpipe"});

/// The pipeline segment (model order) that model chunk `chunk` of `stage` runs under `schedule`
/// over `pp` stages: chunk x pp + stage (interleaved; 0 + stage otherwise), or DualPipe's mirror,
/// stage pp - 1 - s for its second chunk. PlanSpec::chunk_segment and sim's ScheduleShape::segment
/// both ask this.
constexpr int pipeline_segment(Schedule schedule, int pp, int stage, int chunk) {
  if (schedule == Schedule::dualpipe) return chunk == 0 ? stage : pp - 1 - stage;
  return chunk * pp + stage;
}
/// Segments one micro-batch passes through with `chunks` model chunks per stage: pp x chunks, or
/// pp under DualPipe (each segment held by two stages).
constexpr int pipeline_segments(Schedule schedule, int pp, int chunks) {
  return schedule == Schedule::dualpipe ? pp : pp * chunks;
}

/// What a layer stores for its backward. selective: Korthikanti et al. 2022 (the attention core
/// is recomputed); selective-op: PyTorch's per-op selective activation checkpointing as torchtitan
/// applies it to each transformer block (selective_ac_option "op": the attention kernel's output
/// and every other matmul's output are saved, everything else re-runs in the backward).
enum class Recompute { none, selective, full, selective_op };
FORESIGHT_ENUM_NAMES(Recompute, {Recompute::none, "none"}, {Recompute::selective, "selective"},
                     {Recompute::full, "full"}, {Recompute::selective_op, "selective-op"});

enum class Dtype { fp32, tf32, fp16, bf16, fp8 };
FORESIGHT_ENUM_NAMES(Dtype, {Dtype::fp32, "fp32"}, {Dtype::tf32, "tf32"}, {Dtype::fp16, "fp16"},
                     {Dtype::bf16, "bf16"}, {Dtype::fp8, "fp8"});

/// How FP8 GEMM inputs get their scales: Transformer Engine's delayed scaling (an amax history kept
/// from earlier steps: one cast pass per input), dynamic scaling from the tensor's own amax, one
/// scale per tensor (tensorwise: Transformer Engine's current scaling or torchao's) or per row
/// (rowwise, torchao, both operands), or MXFP8 (Transformer Engine's MXFP8BlockScaling: one
/// power-of-two E8M0 scale per 32 consecutive elements, the OCP Microscaling format that
/// Blackwell's tensor cores consume natively), or blockwise (DeepSeek-V3's fine-grained recipe,
/// arXiv:2412.19437 sec. 3.3.2; Transformer Engine's Float8BlockScaling, Megatron-Core's
/// --fp8-recipe blockwise: one fp32 scale per 1 x 128 tile of activations and gradients and per
/// 128 x 128 block of weights, every GEMM with split accumulation; on Hopper cuBLAS's
/// block-scaled GEMMs, on Blackwell emulated by MXFP8 GEMMs).
enum class Fp8Scaling { delayed, tensorwise, rowwise, mxfp8, blockwise };
FORESIGHT_ENUM_NAMES(Fp8Scaling, {Fp8Scaling::delayed, "delayed"}, {Fp8Scaling::tensorwise, "tensorwise"},
                     {Fp8Scaling::rowwise, "rowwise"}, {Fp8Scaling::mxfp8, "mxfp8"},
                     {Fp8Scaling::blockwise, "blockwise"});

/// The recipe whose GEMMs run on a GPU of compute capability `cc`: Transformer Engine emulates the
/// blockwise recipe's GEMMs with MXFP8 ones on Blackwell (pytorch/csrc/extensions/gemm.cpp
/// convert_block_scaling_to_mxfp8_tensor, swizzle.h; its quantizers then keep power-of-two
/// scales, which convert to E8M0 exactly). The tensors themselves stay blockwise FP8 (their
/// quantization, storage and parameter gathers), so only the GEMMs' calibration follows this.
inline Fp8Scaling effective_fp8_scaling(Fp8Scaling s, double cc) {
  return s == Fp8Scaling::blockwise && cc >= 10.0 ? Fp8Scaling::mxfp8 : s;
}

enum class Optimizer { adam, sgd, lamb };
FORESIGHT_ENUM_NAMES(Optimizer, {Optimizer::adam, "adam"}, {Optimizer::sgd, "sgd"}, {Optimizer::lamb, "lamb"});

/// How GPUs inside one node are connected.
enum class IntraFabric { nvswitch, nvlink_mesh, pcie };
FORESIGHT_ENUM_NAMES(IntraFabric, {IntraFabric::nvswitch, "nvswitch"},
                     {IntraFabric::nvlink_mesh, "nvlink-mesh"}, {IntraFabric::pcie, "pcie"});

/// How nodes are connected.
enum class NetworkTopology { fat_tree, ethernet };
FORESIGHT_ENUM_NAMES(NetworkTopology, {NetworkTopology::fat_tree, "fat-tree"},
                     {NetworkTopology::ethernet, "ethernet"});

/// Whose FLOP count a published TFLOP/s figure uses (see shared/published conventions).
enum class FlopsDefinition { hardware, model };
FORESIGHT_ENUM_NAMES(FlopsDefinition, {FlopsDefinition::hardware, "hardware"},
                     {FlopsDefinition::model, "model"});

/// What a measured peak memory counts: what the framework's caching allocator handed out
/// (torch.cuda.max_memory_allocated), what it held from the device (max_memory_reserved), or the
/// whole device use (nvidia-smi: also the CUDA context and NCCL buffers).
/// What a published measurement is used for: pinning calibrated parameters (DESIGN.md, Fidelity
/// rules) or judging a prediction.
enum class MeasuredRole { prediction, calibration };
FORESIGHT_ENUM_NAMES(MeasuredRole, {MeasuredRole::prediction, "prediction"}, {MeasuredRole::calibration, "calibration"});

enum class MemoryKind { allocated, reserved, device };
FORESIGHT_ENUM_NAMES(MemoryKind, {MemoryKind::allocated, "allocated"}, {MemoryKind::reserved, "reserved"},
                     {MemoryKind::device, "device"});

/// The software that runs a plan; it decides implementation details the simulator must model
/// (how pipeline activations cross nodes, what overlaps with what, which attention kernel runs).
/// What each one does is one entry of core/framework.hpp's table, read by every cost model.
enum class Framework { megatron, megatron_core, deepspeed, terapipe, pytorch, torchtitan, generic, foresight_train, llm_foundry, fms_fsdp, flash_attn };
FORESIGHT_ENUM_NAMES(Framework, {Framework::megatron, "megatron"}, {Framework::megatron_core, "megatron-core"},
                     {Framework::deepspeed, "deepspeed"}, {Framework::terapipe, "terapipe"},
                     {Framework::pytorch, "pytorch"}, {Framework::torchtitan, "torchtitan"},
                     {Framework::generic, "generic"}, {Framework::foresight_train, "foresight-train"},
                     {Framework::llm_foundry, "llm-foundry"}, {Framework::fms_fsdp, "fms-fsdp"},
                     {Framework::flash_attn, "flash-attn"});

/// How attention is computed: Megatron-LM 2021-22's unfused path (two batched GEMMs around a
/// fused scale-mask-softmax and a dropout over the (b, a/t, s, s) scores, all stored for the
/// backward), FlashAttention (Dao et al. 2022; PyTorch SDPA's flash backend), or cuDNN's fused
/// attention (Transformer Engine's FusedAttention). The fused ones never write the scores.
/// flash: a FlashAttention-class fused kernel as the GPU file measures it (on the GH100 files,
/// PyTorch 2.11's SDPA); flash2: FlashAttention-2 itself (flash-attn 2.x, and PyTorch SDPA's flash
/// backend through 2.8, which vendors it), where a GPU file tells it apart; cudnn: cuDNN's fused
/// attention (Transformer Engine on Hopper); flash1: the original FlashAttention CUDA kernel
/// (flash-attn 0.x-1.x, 2022), about half FlashAttention-2's speed on an A100, where a GPU file
/// tells it apart; flash-triton: FlashAttention's Triton kernel.
enum class AttentionImpl { unfused, flash, cudnn, flash2, flash_triton, flash1 };
FORESIGHT_ENUM_NAMES(AttentionImpl, {AttentionImpl::unfused, "unfused"}, {AttentionImpl::flash, "flash"},
                     {AttentionImpl::cudnn, "cudnn"}, {AttentionImpl::flash2, "flash2"},
                     {AttentionImpl::flash_triton, "flash-triton"}, {AttentionImpl::flash1, "flash1"});

/// How MoE tokens reach their experts: a gather/scatter permute (our kernels: one permute before
/// the experts, one unpermute after), DeepSpeed-MoE 2021's dense one-hot einsums, `sec,sm->ecm` to
/// dispatch and `sec,ecm->sm` to combine, each a GEMM of 2*S*(E*C)*M FLOPs over the S tokens of a
/// GPU (deepspeed/moe/sharded_moe.py, USE_EINSUM = True, before 2021-12-10), or Megatron-Core's
/// all-to-all dispatcher with Transformer Engine's grouped linears (MoEAlltoAllTokenDispatcher,
/// core_r0.13-r0.17: permute, all-to-all, the received rows sorted by local expert and sorted back
/// after the experts, unpermute; TEGroupedMLP, on sm90 one cuBLAS GEMM per local expert).
/// ZeRO-3's gather unit (FrameworkTraits::zero3_unit).
enum class Zero3Unit { layer, module };
FORESIGHT_ENUM_NAMES(Zero3Unit, {Zero3Unit::layer, "layer"}, {Zero3Unit::module, "module"});

enum class MoeDispatch { permute, einsum, alltoall };
FORESIGHT_ENUM_NAMES(MoeDispatch, {MoeDispatch::permute, "permute"}, {MoeDispatch::einsum, "einsum"},
                     {MoeDispatch::alltoall, "alltoall"});

/// How the expert-parallel dispatch and combine move tokens between nodes. nccl: an all-to-all
/// over the ep group, one copy per routed expert. deepep: DeepEP's normal kernels (DeepSeek-V3
/// sec. 3.2.2; github deepseek-ai/DeepEP): a token crosses the network once per destination node,
/// to the GPU of its own rail, which forwards it over NVLink to the experts there; dispatched in
/// FP8 when training in FP8, combined in 16 bits.
enum class EpDispatcher { nccl, deepep };
FORESIGHT_ENUM_NAMES(EpDispatcher, {EpDispatcher::nccl, "nccl"}, {EpDispatcher::deepep, "deepep"});

/// Rank order, innermost first: tp-dp-pp is Megatron-LM's (tensor ranks adjacent inside a node,
/// then data-parallel replicas, pipeline stages outermost); tp-pp-dp puts pipeline stages next.
/// With context parallelism the cp ranks sit between tp and dp (Megatron-Core's tp-cp-ep-dp-pp).
enum class Placement { tp_dp_pp, tp_pp_dp };
FORESIGHT_ENUM_NAMES(Placement, {Placement::tp_dp_pp, "tp-dp-pp"}, {Placement::tp_pp_dp, "tp-pp-dp"});

/// How the optimizer steps its tensors (torch.optim's implementations): one fused kernel pass
/// (fused=True, apex's and Transformer Engine's fused Adam); PyTorch's foreach ops, one
/// multi-tensor kernel per elementwise step (foreach=True, torch.optim's default on CUDA); or a
/// Python loop over the parameters, each step a kernel per tensor (Composer's DecoupledAdamW).
enum class OptimizerImpl { fused, foreach, for_loop };
FORESIGHT_ENUM_NAMES(OptimizerImpl, {OptimizerImpl::fused, "fused"}, {OptimizerImpl::foreach, "foreach"},
                     {OptimizerImpl::for_loop, "for-loop"});

/// Megatron-Core's vocabulary-parallel cross-entropy (plan.cross_entropy_fusion): none, the
/// unfused path on the fp32 logits (--cross-entropy-loss-fusion off); native, Megatron-Core's own
/// fused kernels (--cross-entropy-loss-fusion, core_r0.8+, megatron/core/fusions/
/// fused_cross_entropy.py); te, Transformer Engine's Triton online-softmax kernels on the 16-bit
/// logits (--cross-entropy-fusion-impl te, core_v0.12+, TE 2.1+ transformer_engine/pytorch/triton/
/// cross_entropy.py).
enum class CrossEntropyFusion { none, native, te };
FORESIGHT_ENUM_NAMES(CrossEntropyFusion, {CrossEntropyFusion::none, "none"}, {CrossEntropyFusion::native, "native"},
                     {CrossEntropyFusion::te, "te"});

/// How context-parallel ranks exchange keys and values: a ring of cp - 1 send/recv steps, each
/// overlapped with the attention block it feeds (Megatron-Core / Transformer Engine's p2p ring,
/// torchtitan's ring attention), or one all-gather of K and V before attention and a
/// reduce-scatter of their gradients after it (Llama 3, Dubey et al. 2024 sec. 3.3.2), or
/// all-to-alls that trade the sequence split for a head split around attention: Q, K and V in,
/// the output back, each rank attending over the whole sequence with heads / cp of its heads
/// (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv:2309.14509; Transformer Engine's cp_comm_type
/// "a2a", Megatron-Core's --cp-comm-type a2a), or both in two levels (a2a+p2p: all-to-alls inside
/// groups of plan.cp_a2a consecutive cp ranks, a ring over the cp / cp_a2a groups; Megatron-Core's
/// --hierarchical-context-parallel-sizes, TE's cp_group pair).
enum class CpComm { ring, all_gather, all_to_all, all_to_all_ring };
inline constexpr int kCpComms = 4;
FORESIGHT_ENUM_NAMES(CpComm, {CpComm::ring, "ring"}, {CpComm::all_gather, "all-gather"},
                     {CpComm::all_to_all, "all-to-all"}, {CpComm::all_to_all_ring, "a2a+p2p"});

/// The FFN's activation. Gated ones (SwiGLU: Shazeer 2020, "GLU Variants Improve Transformer";
/// Llama, Qwen, Mixtral, DeepSeek) multiply an activated gate projection by an up projection:
/// three h x ffn matrices instead of two. Squared ReLU (So et al. 2021, "Primer", arXiv:2109.08668;
/// Nemotron-4) is relu(x)^2: ungated, one elementwise pass like GeLU (Transformer Engine's srelu
/// kernel; Megatron's --squared-relu).
enum class Activation { gelu, relu, squared_relu, swiglu, geglu };
FORESIGHT_ENUM_NAMES(Activation, {Activation::gelu, "gelu"}, {Activation::relu, "relu"},
                     {Activation::squared_relu, "squared-relu"}, {Activation::swiglu, "swiglu"},
                     {Activation::geglu, "geglu"});

/// Position encoding: learned absolute embeddings (GPT-2/3, seq_len x hidden parameters) or
/// parameter-free rotary / ALiBi.
enum class PositionEmbedding { learned, rope, alibi };
FORESIGHT_ENUM_NAMES(PositionEmbedding, {PositionEmbedding::learned, "learned"}, {PositionEmbedding::rope, "rope"},
                     {PositionEmbedding::alibi, "alibi"});

/// LayerNorm (gain and bias) or RMSNorm (gain only: Zhang and Sennrich 2019; Llama).
enum class Norm { layernorm, rmsnorm };
FORESIGHT_ENUM_NAMES(Norm, {Norm::layernorm, "layernorm"}, {Norm::rmsnorm, "rmsnorm"});

/// The simulation engines: the analytic critical-path model and SimGrid's network model
/// (sim/prediction.hpp). Here so that a calibration file can name the engine its fit ran on.
enum class EngineKind { analytic, simgrid };
FORESIGHT_ENUM_NAMES(EngineKind, {EngineKind::analytic, "analytic"}, {EngineKind::simgrid, "simgrid"});

#undef FORESIGHT_ENUM_NAMES

template <class E>
constexpr const char* to_string(E e) {
  for (const auto& [v, n] : EnumNames<E>::kList)
    if (v == e) return n;
  return "?";
}

template <class E>
std::optional<E> parse_enum(std::string_view s) {
  for (const auto& [v, n] : EnumNames<E>::kList)
    if (s == n) return v;
  return std::nullopt;
}

/// "gpipe | 1f1b | interleaved | terapipe": for error messages.
template <class E>
std::string allowed_values() {
  std::string out;
  for (const auto& [v, n] : EnumNames<E>::kList) {
    if (!out.empty()) out += " | ";
    out += n;
  }
  return out;
}

}  // namespace foresight
