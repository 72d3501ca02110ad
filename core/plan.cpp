#include "core/plan.hpp"

#include <algorithm>
#include <numeric>

#include "core/framework.hpp"
#include "core/pipeline_partition.hpp"

namespace foresight {

namespace {
std::string str(long long v) { return std::to_string(v); }
std::string str(double v) { return value_text(v); }
/// (violation, core/plan_violation.hpp, under check_plan's short name)
std::optional<PlanViolation> fail(std::string field, std::string value, std::string rule) {
  return violation(std::move(field), std::move(value), std::move(rule));
}
}  // namespace

std::optional<PlanViolation> fp8_param_gather_violation(const FrameworkTraits& fw, const TrainingSpec& t,
                                                        const PlanSpec& p) {
  if (t.dtype != Dtype::fp8)
    return fail("plan.fp8_param_gather", "true",
                "needs training.dtype = fp8 (it is " + std::string(to_string(t.dtype)) + "): the weights it gathers are FP8 GEMM operands");
  if (p.zero < 1)
    return fail("plan.fp8_param_gather", "true",
                "needs plan.zero >= 1 (it is 0): it is the sharded parameters' all-gather that carries FP8");
  if (!fw.fp8_transformer_engine && t.fp8_scaling != Fp8Scaling::tensorwise)
    return fail("plan.fp8_param_gather", "true",
                "with torchao's float8 needs training.fp8_scaling = tensorwise (it is " +
                    std::string(to_string(t.fp8_scaling)) + "): its FSDP float8 all-gather supports tensorwise scales only");
  return std::nullopt;
}

std::optional<PlanViolation> fp8_recipe_violation(const FrameworkTraits& fw, const TrainingSpec& t, const GpuSpec& gpu) {
  if (t.dtype != Dtype::fp8) return std::nullopt;
  if (!fw.fp8_training)
    return fail("training.dtype", "fp8", std::string(fw.name) + " has no FP8 training (bf16, fp16 or fp32)");
  if (t.fp8_scaling == Fp8Scaling::rowwise && fw.fp8_transformer_engine)
    return fail("training.fp8_scaling", "rowwise",
                std::string(fw.name) +
                    " runs Transformer Engine's FP8 recipes: delayed, tensorwise (current) scaling, mxfp8 or blockwise");
  if (t.fp8_scaling == Fp8Scaling::blockwise) {
    if (!fw.fp8_blockwise)
      return fail("training.fp8_scaling", "blockwise",
                  "is Transformer Engine's Float8BlockScaling recipe (DeepSeek-V3's fine-grained scaling); " +
                      std::string(fw.name) + " does not run it (megatron-core and generic do)");
    // Transformer Engine check_fp8_block_scaling_support: compute capability 9.0 or higher with
    // CUDA 12.9's block-scaled cuBLASLt GEMMs (quantization.py).
    // On 10.x it runs on MXFP8 GEMMs, which TE does not support on 12.0+ (check_mxfp8_support).
    if (!gpu.host_profile.empty() || gpu.compute_capability < 9.0 || gpu.compute_capability >= 11.0)
      return fail("training.fp8_scaling", "blockwise",
                  "needs compute capability 9.x or 10.x (H100, H200: block-scaled FP8 GEMMs; B200, GB200: emulated "
                  "with MXFP8 GEMMs); the cluster's " + gpu.name + " has " + str(gpu.compute_capability));
    return std::nullopt;
  }
  if (t.fp8_scaling != Fp8Scaling::mxfp8) return std::nullopt;
  if (!fw.fp8_transformer_engine)
    return fail("training.fp8_scaling", "mxfp8",
                "is Transformer Engine's MXFP8BlockScaling recipe; " + std::string(fw.name) +
                    " runs torchao's float8 (tensorwise or rowwise)");
  // Transformer Engine v2.x check_mxfp8_support: compute capability 10.x only ("Device compute
  // capability 10.0 or higher required", "not supported on 12.0+ architectures yet").
  if (!gpu.host_profile.empty() || gpu.compute_capability < 10.0 || gpu.compute_capability >= 11.0)
    return fail("training.fp8_scaling", "mxfp8",
                "needs a GPU with block-scaled FP8 tensor cores, compute capability 10.x (B200, GB200); the cluster's " +
                    gpu.name + " has " + str(gpu.compute_capability));
  return std::nullopt;
}

std::vector<int> chunk_layer_counts(const ModelSpec& m, const PlanSpec& p) {
  const int pp = std::max(1, p.pp);
  const int v = p.schedule == Schedule::interleaved ? std::max(1, p.virtual_stages) : 1;
  if (v == 1) return stage_layer_counts(m, p);
  if (int(p.stage_layers.size()) == pp * v) return p.stage_layers;
  return std::vector<int>(std::size_t(pp) * v, m.layers / (pp * v));
}

std::vector<int> stage_layer_counts(const ModelSpec& m, const PlanSpec& p) {
  const int pp = std::max(1, p.pp);
  if (int(p.stage_layers.size()) == pp) return p.stage_layers;
  const int v = p.schedule == Schedule::interleaved ? std::max(1, p.virtual_stages) : 1;
  if (v > 1 && int(p.stage_layers.size()) == pp * v) {
    std::vector<int> counts(pp, 0);
    for (int k = 0; k < pp * v; ++k) counts[k % pp] += p.stage_layers[k];
    return counts;
  }
  if (!p.partition_method.empty()) {
    DeepSpeedPartition split = deepspeed_partition(m, p);
    if (split.problem.empty()) return split.stage_layers;
  }
  std::vector<int> counts(pp, 0);
  int rest = m.layers, first = 0, last = pp;
  if (p.first_stage_layers > 0 && pp > 1) {
    counts[0] = p.first_stage_layers;
    rest -= counts[0];
    first = 1;
  }
  if (p.last_stage_layers > 0 && pp > 1) {
    counts[pp - 1] = p.last_stage_layers;
    rest -= counts[pp - 1];
    last = pp - 1;
  }
  const int middle = std::max(1, last - first);
  for (int s = first; s < last; ++s) counts[s] = std::max(0, rest) / middle;
  return counts;
}

std::vector<int> stage_first_layers(const ModelSpec& m, const PlanSpec& p) {
  const std::vector<int> counts = stage_layer_counts(m, p);
  std::vector<int> first(counts.size(), 0);
  for (std::size_t s = 1; s < counts.size(); ++s) first[s] = first[s - 1] + counts[s - 1];
  return first;
}

bool deepep_runs_ep(int ep) {
  for (int n : {2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160})
    if (ep == n) return true;
  return false;
}

bool recomputes_layer(const ModelSpec& m, const PlanSpec& p, int layer) {
  if (p.recompute != Recompute::full) return false;
  if (p.recompute_layers <= 0) return true;
  // An MTP module's layer: Megatron-Core's MultiTokenPredictionBlock recomputes it under the
  // uniform method only (its _checkpointed_forward skips the block method).
  if (layer >= m.layers) return false;
  if (p.schedule == Schedule::interleaved && p.virtual_stages > 1) {
    // The layer's place in its model chunk (segments of chunk_layer_counts, in model order).
    int first = 0;
    for (int n : chunk_layer_counts(m, p)) {
      if (layer < first + n) return recomputes_position(p, layer - first);
      first += n;
    }
    return recomputes_position(p, layer - first);
  }
  const std::vector<int> first = stage_first_layers(m, p);
  const auto it = std::upper_bound(first.begin(), first.end(), layer);
  const int stage = int(it - first.begin()) - 1;
  return recomputes_position(p, layer - first[std::max(0, stage)]);
}

double whole_recompute_microbatch_share(const PlanSpec& p, int stage, int micro_batches) {
  const int K = p.partial_recompute_microbatches;
  if (K <= 0 || p.recompute != Recompute::full || micro_batches <= 0) return 0.0;
  const int window = std::min(p.pp - stage - 1, micro_batches) + 1;
  int whole = 0;
  for (int k = 0; k < micro_batches; ++k) whole += k % window >= K;
  return double(whole) / micro_batches;
}

double layer_recompute_share(const PlanSpec& p, int index_in_chunk, int stage, int micro_batches) {
  if (recomputes_position(p, index_in_chunk)) return 1.0;
  return whole_recompute_microbatch_share(p, stage, micro_batches);
}

double layer_recompute_share(const ModelSpec& m, const PlanSpec& p, int layer, int index_in_chunk, int stage,
                             int micro_batches) {
  if (layer >= m.layers) return recomputes_layer(m, p, layer) ? 1.0 : 0.0;
  return layer_recompute_share(p, index_in_chunk, stage, micro_batches);
}

std::optional<PlanViolation> check_model(const ModelSpec& m) {
  if (m.attention_head_dim == 0 && m.hidden % m.heads != 0)
    return fail("model.heads", str((long long)m.heads),
                "must divide model.hidden = " + str((long long)m.hidden) + " (or give model.head_dim)");
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0)
    return fail("model.kv_heads", str((long long)m.kv_heads),
                "must divide model.heads = " + str((long long)m.heads));
  if (m.moe) {
    if (m.moe->top_k > m.moe->experts)
      return fail("model.moe.top_k", str((long long)m.moe->top_k),
                  "must not exceed model.moe.experts = " + str((long long)m.moe->experts));
    if (m.moe->imbalance < 1.0)
      return fail("model.moe.imbalance", str(m.moe->imbalance),
                  "must be at least 1 (the busiest expert's tokens over the mean)");
    if (m.moe->first_dense >= m.layers)
      return fail("model.moe.first_dense", str((long long)m.moe->first_dense),
                  "must be below model.layers = " + str((long long)m.layers) + " (no MoE layer would remain)");
    if (m.moe->max_nodes > 0 && m.moe->max_nodes > m.moe->top_k)
      return fail("model.moe.max_nodes", str((long long)m.moe->max_nodes),
                  "must not exceed model.moe.top_k = " + str((long long)m.moe->top_k) +
                      " (a token's experts cannot lie on more nodes than it has experts)");
    if (m.moe->every > m.layers)
      return fail("model.moe.every", str((long long)m.moe->every),
                  "must not exceed model.layers = " + str((long long)m.layers));
  }
  if (m.attention_window) {
    const AttentionWindowSpec& w = *m.attention_window;
    if (int(w.pattern.size()) > m.layers)
      return fail("model.attention_window.pattern", entries(w.pattern.size(), "entries"),
                  "must not be longer than model.layers = " + str((long long)m.layers));
    for (int x : w.pattern)
      if (x != 0 && x != 1)
        return fail("model.attention_window.pattern", str((long long)x), "entries must be 1 (windowed) or 0 (full attention)");
    if (!w.pattern.empty() && std::find(w.pattern.begin(), w.pattern.end(), 1) == w.pattern.end())
      return fail("model.attention_window.pattern", "all 0", "windows no layer (leave model.attention_window out instead)");
  }
  if (m.parallel_block_norms > 2)
    return fail("model.parallel_block_norms", str((long long)m.parallel_block_norms),
                "must be 1 (one norm feeds both branches) or 2 (one per branch)");
  if (m.parallel_block_norms != 1 && !m.parallel_block)
    return fail("model.parallel_block_norms", str((long long)m.parallel_block_norms),
                "applies to model.parallel_block = true only (a sequential block has two norms)");
  return std::nullopt;
}

std::optional<PlanViolation> check_plan(const ModelSpec& m, const ClusterSpec& c,
                                        const TrainingSpec& t, const PlanSpec& p, int gpus_used) {
  if (auto v = check_model(m)) return v;
  const long long world = (long long)p.tp * p.cp * p.pp * p.dp;
  if (world != gpus_used) {
    // Appended piece by piece (g++ 12's -Wrestrict misfires on chained temporaries).
    std::string product = p.cp > 1 ? "tp*cp*pp*dp = " : "tp*pp*dp = ";
    std::vector<int> factors{p.tp};
    if (p.cp > 1) factors.push_back(p.cp);
    factors.push_back(p.pp);
    factors.push_back(p.dp);
    for (std::size_t i = 0; i < factors.size(); ++i) {
      if (i) product += '*';
      product += str((long long)factors[i]);
    }
    product += " = ";
    product += str(world);
    return fail("plan", product, "must equal the GPUs used = " + str((long long)gpus_used));
  }
  if (gpus_used > c.total_gpus())
    return fail("experiment.gpus", str((long long)gpus_used),
                "must not exceed the cluster's " + str((long long)c.total_gpus()) + " GPUs (" +
                    str((long long)c.nodes) + " nodes x " + str((long long)c.gpus_per_node) + ")");
  if (t.optimizer_state_dtype != Dtype::fp32 && t.optimizer_state_dtype != Dtype::bf16)
    return fail("training.optimizer_state_dtype", to_string(t.optimizer_state_dtype),
                "must be fp32 or bf16 (an optimizer keeps its moments and master weights in one of these)");
  if (t.optimizer_state_dtype == Dtype::bf16 && (t.dtype == Dtype::fp32 || t.dtype == Dtype::tf32 || t.dtype == Dtype::fp16))
    return fail("training.optimizer_state_dtype", "bf16",
                "needs bf16 or fp8 training (it is " + std::string(to_string(t.dtype)) +
                    "): a bf16 state updates the bf16 weights in place");
  if (p.bf16_optimizer && t.dtype != Dtype::bf16)
    return fail("plan.bf16_optimizer", "true", "needs training.dtype bf16 (it is " + std::string(to_string(t.dtype)) + ")");
  // The unfused implementations (foreach, for-loop) are priced for Adam(W) stepped on the GPU.
  if (p.optimizer_impl.value_or(OptimizerImpl::fused) != OptimizerImpl::fused &&
      (t.optimizer != Optimizer::adam || p.offload.optimizer))
    return fail("plan.optimizer_impl", to_string(*p.optimizer_impl),
                "is priced for Adam(W) stepped on the GPU (training.optimizer " + std::string(to_string(t.optimizer)) +
                    (p.offload.optimizer ? ", plan.offload.optimizer true" : "") + ")");
  if (t.fp8_scaling != Fp8Scaling::delayed && t.dtype != Dtype::fp8)
    return fail("training.fp8_scaling", to_string(t.fp8_scaling), "applies to dtype fp8 only (it is " +
                                                                      std::string(to_string(t.dtype)) + ")");
  if (!(c.gpu.peak(t.dtype) > FlopsPerSecond(0)))
    return fail("training.dtype", to_string(t.dtype),
                "the cluster's GPU " + c.gpu.name + " has no " + std::string(to_string(t.dtype)) +
                    " peak in its GPU file (unsupported precision)");
  const FrameworkTraits& fw = framework_traits(p.framework);
  if (p.zero < 0 || p.zero > 3) return fail("plan.zero", str((long long)p.zero), "must be 0, 1, 2 or 3");
  if (p.expert_tp > 0 && !m.moe)
    return fail("plan.expert_tp", str((long long)p.expert_tp), "applies to models with moe only");
  if (!p.partition_method.empty() && (!p.stage_layers.empty() || p.first_stage_layers > 0 || p.last_stage_layers > 0))
    return fail("plan.partition_method", p.partition_method,
                "cannot be combined with plan.stage_layers or plan.first_stage_layers / last_stage_layers (give one)");
  // What the chosen framework cannot run: its traits hold these rules, and the planner's search
  // skips the same plans (FrameworkTraits::runs).
  if (auto v = fw.refusal(p)) return v;
  if (auto v = fw.model_refusal(m)) return v;
  if (auto v = fw.model_plan_refusal(m, p)) return v;
  if (m.mtp_layers > 0 && !c.gpu.host_profile.empty())
    return fail("model.mtp_layers", str((long long)m.mtp_layers),
                "is not priced on a CPU device (the cluster's GPU file names a host_profile: the bundled trainer's "
                "measured CPU ops, which have no MTP module)");
  const bool uneven = p.uneven_split();
  if (!p.partition_method.empty()) {
    const DeepSpeedPartition split = deepspeed_partition(m, p);
    if (!split.problem.empty()) {
      std::string rule = split.problem;
      if (!split.stage_layers.empty()) {
        rule += " (transformer layers per stage: ";
        for (std::size_t i = 0; i < split.stage_layers.size(); ++i) {
          if (i) rule += ' ';
          rule += std::to_string(split.stage_layers[i]);
        }
        rule += "); the simulator needs the embedding on the first stage, the head on the last and a layer on each";
      }
      return fail("plan.partition_method", p.partition_method, rule);
    }
  } else if (!p.stage_layers.empty()) {
    if (p.schedule == Schedule::interleaved) {
      const long long segments = (long long)p.pp * std::max(1, p.virtual_stages);
      if ((long long)p.stage_layers.size() != segments)
        return fail("plan.stage_layers", entries(p.stage_layers.size(), "entries"),
                    "with the interleaved schedule must list one layer count per model chunk, plan.pp x "
                    "plan.virtual_stages = " + str(segments) + ", in stage order");
    } else if (int(p.stage_layers.size()) != p.pp) {
      return fail("plan.stage_layers", entries(p.stage_layers.size(), "entries"),
                  "must list one layer count per pipeline stage (plan.pp = " + str((long long)p.pp) + ")");
    }
    long long sum = 0;
    for (std::size_t i = 0; i < p.stage_layers.size(); ++i) {
      const int n = p.stage_layers[i];
      // The first segment may hold the embedding alone and the last the loss alone, or the MTP
      // modules and the loss (Megatron-Core's account_for_embedding_in_pipeline_split and
      // account_for_loss_in_pipeline_split, which count each as a layer: Llama 3.1 405B's 126 + 2
      // over 128 chunks of Megatron-Bridge's GB200 recipes; its layout "...|mL", DeepSeek-V3's).
      const bool edge_alone = n == 0 && (i == 0 || i + 1 == p.stage_layers.size()) && p.stage_layers.size() > 1;
      if (n < 0 || (n == 0 && !edge_alone))
        return fail("plan.stage_layers", str((long long)n),
                    "every stage must hold at least one layer (the first may hold the embedding alone and the last the "
                    "loss alone, or the MTP modules and the loss: 0)");
      sum += n;
    }
    if (sum != m.layers)
      return fail("plan.stage_layers", "sum " + str(sum), "must sum to model.layers = " + str((long long)m.layers));
    if (p.first_stage_layers > 0 || p.last_stage_layers > 0)
      return fail("plan.stage_layers", entries(p.stage_layers.size(), "entries"),
                  "cannot be combined with plan.first_stage_layers / plan.last_stage_layers (give one or the other)");
  } else if (p.first_stage_layers > 0 || p.last_stage_layers > 0) {
    const int fixed = (p.first_stage_layers > 0) + (p.last_stage_layers > 0);
    if (p.pp <= fixed)
      return fail(p.first_stage_layers > 0 ? "plan.first_stage_layers" : "plan.last_stage_layers",
                  str((long long)(p.first_stage_layers > 0 ? p.first_stage_layers : p.last_stage_layers)),
                  "needs plan.pp > " + str((long long)fixed) + " (other stages to split the rest over)");
    const long long rest = (long long)m.layers - p.first_stage_layers - p.last_stage_layers;
    const long long middle = p.pp - fixed;
    if (rest < middle || rest % middle != 0)
      return fail(p.first_stage_layers > 0 ? "plan.first_stage_layers" : "plan.last_stage_layers",
                  str((long long)(p.first_stage_layers > 0 ? p.first_stage_layers : p.last_stage_layers)),
                  "leaves " + str(rest) + " layers, which must split evenly over the other " + str(middle) +
                      " stages (at least one each)");
  } else if (m.layers % p.pp != 0) {
    return fail("plan.pp", str((long long)p.pp),
                "must divide model.layers = " + str((long long)m.layers) +
                    " (or give plan.stage_layers, or plan.first_stage_layers / plan.last_stage_layers)");
  }
  if (uneven && p.stage_layers.empty() && p.schedule == Schedule::interleaved)
    return fail("plan.schedule", "interleaved",
                "needs an even split of layers over stages or plan.stage_layers per model chunk (first/last "
                "counts and partition methods apply to non-interleaved schedules)");
  if (m.heads % p.tp != 0)
    return fail("plan.tp", str((long long)p.tp), "must divide model.heads = " + str((long long)m.heads));
  if (m.ffn_hidden % p.tp != 0)
    return fail("plan.tp", str((long long)p.tp),
                "must divide model.ffn_hidden = " + str((long long)m.ffn_hidden));
  if (m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    return fail("plan.tp", str((long long)p.tp),
                "must divide model.kv_heads = " + str((long long)m.kv_heads) + " or be a multiple of it");
  if (t.global_batch % ((long long)p.dp * p.micro_batch) != 0)
    return fail("training.global_batch", str((long long)t.global_batch),
                "must be a multiple of plan.dp * plan.micro_batch = " + str((long long)p.dp) + " * " +
                    str((long long)p.micro_batch) + " = " + str((long long)p.dp * p.micro_batch));
  if (!fw.gradient_accumulation && t.global_batch != (long long)p.micro_batch * p.dp * p.cp)
    return fail("plan.micro_batch", str((long long)p.micro_batch),
                std::string(fw.name) + " takes one optimizer step per micro-batch (no gradient accumulation): "
                "plan.micro_batch must be training.global_batch / (plan.dp * plan.cp) = " +
                    str((long long)t.global_batch) + " / " + str((long long)p.dp * p.cp));
  if (fw.hybrid_sharding_per_node && p.shard_group > 0 && p.shard_group != p.grad_ranks() &&
      p.shard_group != c.gpus_per_node)
    return fail("plan.shard_group", str((long long)p.shard_group),
                std::string(fw.name) + "'s hybrid sharding shards within a node (FSDP's HYBRID_SHARD over the node's "
                "ranks): it must be the node's " + str((long long)c.gpus_per_node) + " GPUs or the whole "
                "data-parallel group, " + str((long long)p.grad_ranks()));
  if (p.cp > 1) {
    if (m.seq_len % (2LL * p.cp) != 0)
      return fail("plan.cp", str((long long)p.cp),
                  "2 * plan.cp must divide model.seq_len = " + str((long long)m.seq_len) +
                      " (each rank holds two of 2 cp chunks for causal load balancing)");
    if (!p.token_slices.empty() || p.schedule == Schedule::terapipe)
      return fail("plan.cp", str((long long)p.cp), "cannot be combined with TeraPipe token slices");
    if (m.moe && !fw.expert_folding)
      return fail("plan.cp", str((long long)p.cp),
                  std::string("with an MoE model needs a framework that folds the experts over tp x cp x dp (") +
                      fw.name + " does not: megatron-core or generic do)");
    if (p.placement != Placement::tp_dp_pp)
      return fail("plan.placement", to_string(p.placement), "must be tp-dp-pp with plan.cp > 1 (tp-cp-dp-pp, Megatron-Core's order)");
    if (p.attention == AttentionImpl::unfused)
      return fail("plan.attention", "unfused", "context parallelism runs on fused attention kernels (flash, flash2 or cudnn)");
    if (p.cp_comm == CpComm::all_to_all_ring) {
      if (p.cp_a2a < 2 || p.cp_a2a >= p.cp || p.cp % p.cp_a2a != 0)
        return fail("plan.cp_a2a", str((long long)p.cp_a2a),
                    "must be a divisor of plan.cp = " + str((long long)p.cp) +
                        " between 2 and cp / 2 under plan.cp_comm a2a+p2p (the all-to-all groups; the ring runs over "
                        "cp / cp_a2a of them)");
    } else if (p.cp_a2a != 0) {
      return fail("plan.cp_a2a", str((long long)p.cp_a2a), "applies to plan.cp_comm a2a+p2p only (leave it out)");
    }
    if (p.cp_comm == CpComm::all_to_all || p.cp_comm == CpComm::all_to_all_ring) {
      // Each rank attends with heads / (its all-to-all group) of its TP rank's heads, so both the
      // query and the key/value heads of a TP rank must split evenly over that group
      // (Transformer Engine's a2a asserts num_heads % cp_size == 0 for Q, K and V).
      const long long group = p.cp_heads();
      const long long q_heads = m.heads / p.tp, kv_heads = std::max(1, m.kv_heads / p.tp);
      if (q_heads % group != 0 || kv_heads % group != 0)
        return fail(p.cp_comm == CpComm::all_to_all ? "plan.cp" : "plan.cp_a2a", str(group),
                    "must divide the attention heads of each TP rank under plan.cp_comm " +
                        std::string(to_string(p.cp_comm)) + " (" + str(q_heads) + " query and " + str(kv_heads) +
                        " key/value heads per rank at plan.tp = " + str((long long)p.tp) + ")");
      if (m.mla)
        return fail("plan.cp_comm", to_string(p.cp_comm),
                    "is not modelled for multi-latent attention (model.mla): use ring");
    }
    if (m.attention_window && p.cp_comm != CpComm::all_to_all) {
      // Transformer Engine's ring attention (the p2p exchange Megatron-Core uses) has no
      // sliding-window masks; the all-gather exchange of windowed layers is not modelled. The
      // all-to-all one attends whole sequences and runs them as any layer.
      return fail("plan.cp", str((long long)p.cp),
                  "is not supported with sliding-window attention (model.attention_window) unless plan.cp_comm is "
                  "all-to-all");
    }
  }
  if (p.cp <= 1 && p.cp_a2a != 0)
    return fail("plan.cp_a2a", str((long long)p.cp_a2a), "applies to plan.cp_comm a2a+p2p with plan.cp > 1 only");
  if (p.reduce_dtype && *p.reduce_dtype != Dtype::fp32 && *p.reduce_dtype != Dtype::bf16 && *p.reduce_dtype != Dtype::fp16)
    return fail("plan.reduce_dtype", to_string(*p.reduce_dtype), "must be fp32, bf16 or fp16 (NCCL reduces no 8-bit floats)");
  if (p.reduce_dtype && p.grad_ranks() < 2)
    return fail("plan.reduce_dtype", to_string(*p.reduce_dtype), "needs data parallelism (plan.dp * plan.cp > 1): nothing is reduced");
  if (p.tp_overlap) {
    if (p.tp < 2 || !p.sequence_parallel)
      return fail("plan.tp_overlap", "true", "needs plan.tp > 1 and plan.sequence_parallel (the overlapped collectives are its all-gathers and reduce-scatters)");
  }
  if (p.shard_group > 0) {
    if (p.zero == 0)
      return fail("plan.shard_group", str((long long)p.shard_group), "needs plan.zero >= 1 (nothing is sharded at zero 0)");
    if (p.grad_ranks() % p.shard_group != 0)
      return fail("plan.shard_group", str((long long)p.shard_group),
                  "must divide plan.dp * plan.cp = " + str((long long)p.grad_ranks()) + " (replicas of equal shard groups)");
    if (m.moe)
      return fail("plan.shard_group", str((long long)p.shard_group),
                  "is not supported with MoE models yet (expert state shards over dp / ep)");
  }
  if (!p.reshard_after_forward && p.zero != 3)
    return fail("plan.reshard_after_forward", "false", "applies to plan.zero = 3 only (it is " + str((long long)p.zero) + ")");
  if (p.param_gather_overlap && (p.zero < 1 || p.zero > 2))
    return fail("plan.param_gather_overlap", "true",
                "applies to plan.zero = 1 or 2, whose parameters are all-gathered after the step (it is " +
                    str((long long)p.zero) + "; ZeRO-3 gathers before each use)");
  if (p.zero == 3 && !p.token_slices.empty())
    return fail("plan.zero", "3", "is not supported with TeraPipe token slices (every slice would re-gather its layers)");
  if (p.offload.activations < 0.0 || p.offload.activations > 1.0)
    return fail("plan.offload.activations", str(p.offload.activations), "must lie in [0, 1]");
  if (p.offload.optimizer && !(c.host.memory_bandwidth.value() > 0))
    return fail("plan.offload.optimizer", "true",
                "needs cluster.host.memory_GBps, which cluster " + (c.name.empty() ? std::string("(unnamed)") : c.name) +
                    " does not state: an offloaded optimizer steps on the host CPUs, at the rate their memory "
                    "streams the fp32 state");
  if (p.virtual_stages > 1 && p.schedule != Schedule::interleaved)
    return fail("plan.virtual_stages", str((long long)p.virtual_stages),
                "greater than 1 needs plan.schedule = interleaved (it is " +
                    std::string(to_string(p.schedule)) + ")");
  if (p.schedule == Schedule::interleaved) {
    if (p.pp < 2)
      return fail("plan.schedule", "interleaved", "needs plan.pp >= 2 (it is " + str((long long)p.pp) + ")");
    if (p.stage_layers.empty() && m.layers % ((long long)p.pp * p.virtual_stages) != 0)
      return fail("plan.virtual_stages", str((long long)p.virtual_stages),
                  "plan.pp * plan.virtual_stages = " + str((long long)p.pp * p.virtual_stages) +
                      " must divide model.layers = " + str((long long)m.layers) +
                      " (or give plan.stage_layers, one count per model chunk)");
    // Megatron-LM's interleaved schedule runs micro-batches in groups of pp.
    if (p.micro_batches(t) % p.pp != 0)
      return fail("plan.schedule", "interleaved",
                  "needs the micro-batches per pipeline (" + str((long long)p.micro_batches(t)) +
                      ") to be a multiple of plan.pp = " + str((long long)p.pp));
  }
  if (p.schedule == Schedule::zb_h1 && p.pp < 2)
    return fail("plan.schedule", "zb-h1", "needs plan.pp >= 2 (it is " + str((long long)p.pp) + "): without a pipeline it is 1F1B");
  if (p.schedule == Schedule::dualpipe) {
    // deepseek-ai/DualPipe dualpipe.py step(): num_ranks even, num_chunks even and >= 2 x num_ranks.
    if (p.pp < 2 || p.pp % 2 != 0)
      return fail("plan.schedule", "dualpipe", "needs an even plan.pp >= 2 (it is " + str((long long)p.pp) +
                                                   "): the two directions meet in the middle pair of stages");
    const long long mbs = p.micro_batches(t);
    if (mbs % 2 != 0 || mbs < 2LL * p.pp)
      return fail("plan.schedule", "dualpipe",
                  "needs an even number of micro-batches per pipeline, at least 2 x plan.pp = " + str(2LL * p.pp) +
                      " (it is " + str(mbs) + "): half are fed in at each end");
    if (p.zero >= 3)
      return fail("plan.schedule", "dualpipe",
                  "is not modelled with plan.zero = 3 (each stage holds two model chunks whose layers another stage "
                  "also holds; DeepSeek-V3 runs it with ZeRO-1)");
  }
  if (p.recompute_layers > 0) {
    const std::string n = str((long long)p.recompute_layers);
    if (p.recompute != Recompute::full)
      return fail("plan.recompute_layers", n,
                  "needs plan.recompute = full (it is " + std::string(to_string(p.recompute)) +
                      "): it counts the whole layers of each stage that are recomputed");
    const std::vector<int> counts = chunk_layer_counts(m, p);
    const int v = p.schedule == Schedule::interleaved ? std::max(1, p.virtual_stages) : 1;
    const int largest = *std::max_element(counts.begin(), counts.end());
    if (p.recompute_layers > largest)
      return fail("plan.recompute_layers", n,
                  "must not exceed the layers of the largest stage" + std::string(v > 1 ? " chunk" : "") + " (" +
                      str((long long)largest) + ")");
  }
  if (p.partial_recompute_microbatches > 0) {
    const std::string k = str((long long)p.partial_recompute_microbatches);
    if (p.recompute != Recompute::full || p.recompute_layers <= 0)
      return fail("plan.partial_recompute_microbatches", k,
                  "needs plan.recompute = full with plan.recompute_layers > 0 (the layers the partial micro-batches "
                  "recompute; the others recompute all)");
    if (p.pp < 2 || p.schedule != Schedule::one_f_one_b)
      return fail("plan.partial_recompute_microbatches", k,
                  "needs a 1F1B pipeline (plan.pp > 1, plan.schedule = 1f1b): the window is the stage's outstanding micro-batches");
  }
  if (!p.token_slices.empty() && p.schedule != Schedule::terapipe)
    return fail("plan.token_slices", "[" + str((long long)p.token_slices.size()) + " slices]",
                "needs plan.schedule = terapipe (it is " + std::string(to_string(p.schedule)) + ")");
  if (p.schedule == Schedule::terapipe && !p.token_slices.empty()) {
    long long sum = 0;
    for (int s : p.token_slices) {
      if (s <= 0) return fail("plan.token_slices", str((long long)s), "every slice must be positive");
      sum += s;
    }
    if (sum != m.seq_len)
      return fail("plan.token_slices", "sum " + str(sum),
                  "must sum to model.seq_len = " + str((long long)m.seq_len));
  }
  if (p.ep > 1 && !m.moe)
    return fail("plan.ep", str((long long)p.ep), "greater than 1 needs a model with moe");
  if (auto v = fp8_recipe_violation(fw, t, c.gpu)) return v;
  if (p.fp8_param_gather)
    if (auto v = fp8_param_gather_violation(fw, t, p)) return v;
  if (p.recompute_modules.any() && p.recompute == Recompute::full)
    return fail("plan.recompute_modules", "(set)",
                "needs plan.recompute other than full (full recompute stores only each layer's input already)");
  if (p.recompute_modules.mla_up_proj && !m.mla)
    return fail("plan.recompute_modules.mla_up_proj", "true", "needs a model with mla (multi-head latent attention)");
  if (p.recompute_modules.moe_act && !m.moe)
    return fail("plan.recompute_modules.moe_act", "true", "needs a model with moe");
  // Megatron-Core checkpoints the MLP of dense layers only (transformer_layer.py recompute_mlp); on
  // a model whose every layer is MoE (an MTP layer is of the last layer's kind) it would do nothing.
  if (p.recompute_modules.mlp && m.moe_layers() == m.layers)
    return fail("plan.recompute_modules.mlp", "true",
                "needs a dense (non-MoE) layer: it recomputes dense MLPs (recompute_modules.moe recomputes MoE layers)");
  if (p.recompute_modules.moe && !m.moe)
    return fail("plan.recompute_modules.moe", "true", "needs a model with moe");
  if (p.recompute_modules.moe && p.ep_overlap)
    return fail("plan.recompute_modules.moe", "true",
                "cannot be combined with plan.ep_overlap (Megatron-Core refuses moe recompute with "
                "overlap_moe_expert_parallel_comm)");
  if (p.recompute_modules.shared_experts && (!m.moe || m.moe->shared_experts == 0))
    return fail("plan.recompute_modules.shared_experts", "true", "needs a model with moe.shared_experts > 0");
  if (p.ep_dispatcher == EpDispatcher::deepep && (!m.moe || p.ep < 2))
    return fail("plan.ep_dispatcher", "deepep", "needs a model with moe and plan.ep > 1 (it moves the experts' tokens)");
  // DeepEP runs over the expert-tensor x expert-parallel group (Megatron-Core's flex dispatcher
  // builds its buffer on tp_ep_group): etp x ep ranks.
  const int deepep_ranks = p.etp() * p.ep;
  if (p.ep_dispatcher == EpDispatcher::deepep && !deepep_runs_ep(deepep_ranks))
    return fail("plan.ep", str((long long)p.ep),
                "gives DeepEP a group of plan.expert_tp x plan.ep = " + str((long long)deepep_ranks) +
                    " ranks, which it has no kernel configuration for (plan.ep_dispatcher = deepep: 2, 4, 8, 16, 24, "
                    "32, 48, 64, 96, 128, 144 or 160 ranks, deep_ep Buffer.get_dispatch_config)");
  if (p.ep_dispatcher == EpDispatcher::deepep && deepep_ranks > c.gpus_per_node && c.gpus_per_node != 8)
    return fail("plan.ep_dispatcher", "deepep",
                "spans nodes of " + str((long long)c.gpus_per_node) +
                    " GPUs; DeepEP's internode kernels forward over NVLink between exactly 8 GPUs per node "
                    "(NUM_MAX_NVL_PEERS)");
  if (p.wgrad_deferral_limit > 0 && !p.defer_embedding_wgrad)
    return fail("plan.wgrad_deferral_limit", str((long long)p.wgrad_deferral_limit),
                "needs plan.defer_embedding_wgrad (it counts the micro-batches whose head weight gradients are deferred)");
  // Megatron-Core's TransformerConfig refuses the deferral without a pipeline: it moves the GEMMs
  // into the flush, which a single stage does not have.
  if (p.defer_embedding_wgrad && p.pp == 1)
    return fail("plan.defer_embedding_wgrad", "true",
                "needs plan.pp > 1 (the deferred GEMMs run in the pipeline flush)");
  if (p.moe_permute_fusion && !m.moe)
    return fail("plan.moe_permute_fusion", "true", "needs a model with moe (it fuses the routed tokens' permute)");
  if (p.moe_shared_expert_overlap) {
    if (!m.moe || m.moe->shared_experts == 0)
      return fail("plan.moe_shared_expert_overlap", "true", "needs a model with moe.shared_experts > 0");
    // Megatron-Core's transformer_config.py asserts both (the alltoall or allgather dispatcher only;
    // not with the combined 1F1B overlap).
    if (p.ep_dispatcher == EpDispatcher::deepep)
      return fail("plan.moe_shared_expert_overlap", "true",
                  "cannot be combined with plan.ep_dispatcher = deepep (Megatron-Core overlaps shared experts with "
                  "its alltoall dispatcher only)");
    if (p.ep_overlap)
      return fail("plan.moe_shared_expert_overlap", "true",
                  "cannot be combined with plan.ep_overlap (Megatron-Core refuses both)");
  }
  if (p.ep_overlap) {
    if (!m.moe || p.ep < 2)
      return fail("plan.ep_overlap", "true", "needs a model with moe and plan.ep > 1 (the overlapped collectives are its all-to-alls)");
    if (p.pp > 1 && p.schedule != Schedule::interleaved)
      return fail("plan.ep_overlap", "true",
                  "runs with plan.pp = 1 or the interleaved schedule only (Megatron-Core's combined 1F1B)");
    if (p.recompute == Recompute::full)
      return fail("plan.ep_overlap", "true", "cannot be combined with full recompute (Megatron-Core refuses it)");
    if (p.zero == 3)
      return fail("plan.ep_overlap", "true", "is not modelled with plan.zero = 3 (per-layer parameter gathers)");
  }
  if (m.moe) {
    if (m.moe->experts % p.ep != 0)
      return fail("plan.ep", str((long long)p.ep),
                  "must divide model.moe.experts = " + str((long long)m.moe->experts));
    if (p.etp() != p.tp) {
      // MoE parallel folding (Megatron-Core >= 0.10): the experts get their own tensor-parallel
      // degree, and ep spans whatever of tp x cp x dp expert_tp leaves (a framework without it
      // refused the plan above).
      if (p.tp % p.etp() != 0 && p.etp() % p.tp != 0)
        return fail("plan.expert_tp", str((long long)p.expert_tp),
                    "must divide plan.tp = " + str((long long)p.tp) + " or be a multiple of it");
      if (p.placement != Placement::tp_dp_pp)
        return fail("plan.placement", to_string(p.placement),
                    "must be tp-dp-pp when plan.expert_tp differs from plan.tp (the experts fold over the stage's "
                    "consecutive tp-cp-dp ranks)");
      if (p.tp > 1 && !p.sequence_parallel)
        return fail("plan.expert_tp", str((long long)p.expert_tp),
                    "differs from plan.tp = " + str((long long)p.tp) +
                        ": needs plan.sequence_parallel (each tensor-parallel rank routes its own sequence shard)");
    }
    // Megatron-Core: "When using expert parallelism and tensor parallelism, sequence parallelism
    // must be used" (TransformerConfig.__post_init__): each TP rank routes its own shard.
    if (fw.expert_folding && p.ep > 1 && p.tp > 1 && !p.sequence_parallel)
      return fail("plan.sequence_parallel", "false",
                  std::string(fw.name) + " needs it with expert parallelism (plan.ep > 1) and plan.tp > 1");
    const long long expert_ranks = (long long)p.tp * p.cp * p.dp;
    if (expert_ranks % ((long long)p.etp() * p.ep) != 0)
      return fail("plan.ep", str((long long)p.ep),
                  fw.expert_folding
                      ? "times the experts' tensor-parallel degree " + str((long long)p.etp()) +
                            " must divide plan.tp * plan.cp * plan.dp = " + str(expert_ranks) +
                            " (the ranks a stage's experts are folded over)"
                      : "must divide plan.dp = " + str((long long)p.dp) + " (experts are sharded over data-parallel ranks)");
    if (!fw.expert_folding && p.dp % p.ep != 0)
      return fail("plan.ep", str((long long)p.ep),
                  "must divide plan.dp = " + str((long long)p.dp) + " (experts are sharded over data-parallel ranks)");
  }
  if (p.compile_loss && !p.compile)
    return fail("plan.compile_loss", "true", "needs plan.compile: true (torch.compile compiles the loss with the model)");
  if (p.recompute == Recompute::selective_op) {
    // The saved set is defined on a dense block's matmuls (wq, wk, wv, wo, w1, w3, w2); routed
    // experts' grouped GEMMs and MLA's latent projections follow other counting rules.
    if (m.moe || m.mla)
      return fail("plan.recompute", "selective-op", "is modelled for dense, non-MLA blocks only");
  }
  return std::nullopt;
}

std::string recompute_module_names(const RecomputeModules& mods, const std::string& separator) {
  const std::pair<bool, const char*> all[] = {{mods.layernorm, "layernorm"}, {mods.mla_up_proj, "mla_up_proj"},
                                              {mods.moe_act, "moe_act"},     {mods.mlp, "mlp"},
                                              {mods.moe, "moe"},             {mods.shared_experts, "shared_experts"}};
  std::string s;
  for (const auto& [set, name] : all)
    if (set) s += (s.empty() ? "" : separator) + name;
  return s;
}

}  // namespace foresight
