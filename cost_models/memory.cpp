#include "cost_models/memory.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.hpp"
#include "core/flops.hpp"

namespace foresight::cost_models {

namespace {

double ffn_hidden(const ModelSpec& m) { return m.ffn_hidden > 0 ? m.ffn_hidden : 4.0 * m.hidden; }

/// Width of the keys (and of the values): kv_heads * head_dim, = h for multi-head attention.
double kv_width(const ModelSpec& m) {
  if (m.mla) return m.kv_width();
  const int kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;
  return double(kv_heads) * m.head_dim();
}


bool sequence_parallel(const PlanSpec& p) { return p.sequence_parallel && p.tp > 1; }

bool fused_attention(const ExecutionModel& r) { return r.attention != AttentionImpl::unfused; }

/// Bytes per (batch, head, query, key) element of the unfused attention core a layer stores: the
/// softmax output (a; 4 where Megatron's PyTorch fallback keeps it in fp32 for the softmax's
/// backward, plan.fused_softmax false), and with dropout its 1-byte mask and its output (a). 5
/// for Megatron.
double unfused_core_bytes(const ExecutionModel& r, const ModelSpec& m) {
  const double a = r.bytes.activation;
  const double probs = r.softmax_fallback ? 4.0 : a;
  return m.stores_dropout_masks(r.framework->activations.dropout) ? probs + 1.0 + a : probs;
}

/// One layer, one micro-batch: the linear-in-tokens part for `tokens` tokens per sequence and the
/// attention core over `attention_area` query-key pairs per sequence and head (s*s for a whole
/// sequence, sum l_i c_i for TeraPipe slices). See activation_bytes_per_layer for the terms.
Bytes layer_bytes(const ExecutionModel& rc, const ModelSpec& m, const PlanSpec& p, int micro_batch, double tokens,
                  double attention_area, bool moe_layer) {
  const double b = micro_batch, h = m.hidden, heads = m.heads, t = p.tp;
  const double act = rc.bytes.activation, res = rc.bytes.residual;
  const double mask = m.stores_dropout_masks(rc.framework->activations.dropout) ? 1.0 : 0.0;
  const double sbh = tokens * b * h;
  const double replicated_div = sequence_parallel(p) ? t : 1.0;
  if (p.recompute == Recompute::full) return Bytes(res * sbh / replicated_div);  // layer input only

  const double f = ffn_hidden(m), k = kv_width(m);
  if (p.recompute == Recompute::selective_op) {
    // torchtitan's per-op policy (roofline.hpp LayerTimes::op_checkpoint_saved): the block's input,
    // the outputs of wq, wv and w1 (column-parallel: sharded over t), of w2 for a gated block (the
    // row-parallel partial sum, whole on every rank), the attention output and its fp32
    // log-sum-exp per head and query.
    const double sharded = act * (m.q_width() + k + f + m.v_width()) / h;
    const double whole = m.gated() ? act : 0.0;
    // With sequence parallelism the reduce-scatters after wo and w2 are saved too (their outputs,
    // this rank's 1/t of the tokens).
    const double scattered = sequence_parallel(p) ? 2.0 * act / t : 0.0;
    return Bytes(sbh * (res / replicated_div + sharded / t + whole + scattered) + 4.0 * heads * tokens * b / t);
  }
  // In units of sbh bytes. Replicated across the TP group unless sequence parallel:
  // QKV input, FFN input, two layernorm inputs (residual stream), two dropout masks. A parallel
  // block's norms both read the layer input (stored once); with one shared norm QKV and FFN read
  // the same normed tensor too.
  // Under FP8 training a framework that saves its Linears' FP8-cast inputs
  // (ActivationLayout::fp8_linear_inputs) stores 1 byte for each: the QKV and FFN inputs, MLA's
  // latents, the projection input (ActivationLayout::fp8_attention_output_bytes), the dispatched
  // expert inputs, the activation's inputs (where fp8_activation_inputs) and the FC2 input.
  const bool fp8_inputs = rc.framework->activations.fp8_linear_inputs && rc.dtype == Dtype::fp8;
  const double lin = fp8_inputs ? 1.0 : act;
  const RecomputeModules& mods = p.recompute_modules;
  // Recomputed norms (recompute_modules.layernorm) store neither of their outputs.
  const double norm_outputs = mods.layernorm ? 0.0 : 1.0;
  // A checkpointed dense MLP (recompute_modules.mlp) keeps only its input, the residual stream the
  // layer stores for the FFN norm anyway: its fused norm's output (the FFN input) and everything
  // inside it are made again (Transformer Engine's LayerNormMLP path; MoE layers keep their own
  // norm outside the block, whose output the checkpointed MoE block keeps as its input).
  const bool mlp_checkpointed = mods.mlp && !(moe_layer && m.moe);
  const bool moe_checkpointed = mods.moe && moe_layer && m.moe;
  const double ffn_norm_output = mlp_checkpointed ? 0.0 : 1.0;
  double replicated = norm_outputs * (1.0 + ffn_norm_output) * lin + 2.0 * res + 2.0 * mask;
  if (m.parallel_block) replicated = norm_outputs * lin * m.parallel_block_norms + res + 2.0 * mask;
  // Divided by t: Q (q/h), K and V (k/h each), projection input (q/h), FC2 input and the
  // activation's input (f/h each; a gated activation keeps both its gate and up inputs, 2f/h,
  // as Megatron-Core's fused bias-SwiGLU saves them), and a copy of the attention output where
  // the framework makes one before the projection.
  const double q = m.q_width() / h, v = m.v_width() / h;
  // The FFN's stored tensors in bytes per element of its width: the activation's inputs (two for a
  // gated one) and the FC2 input, which recompute_modules.moe_act re-runs in an MoE layer.
  const double act_inputs =
      (m.gated() ? 2.0 : 1.0) * (fp8_inputs && !rc.framework->activations.fp8_activation_inputs ? act : lin);
  const double ffn_bytes = mlp_checkpointed ? 0.0 : act_inputs + lin;
  // moe_act re-runs the routed experts' activation only (moe/experts.py), not the shared experts'.
  const double expert_ffn_bytes = act_inputs + (mods.moe_act ? 0.0 : lin);
  const double shared_ffn_bytes = mods.shared_experts ? 0.0 : act_inputs + lin;
  // Q, K and V for the attention core; MLA's up-projections (recompute_modules.mla_up_proj) make
  // them again from the latents.
  const double qkv_kept = mods.mla_up_proj && m.mla ? 0.0 : 1.0;
  double sharded = qkv_kept * (act * q + 2.0 * act * k / h) +
                   (fp8_inputs ? rc.framework->activations.fp8_attention_output_bytes : act) * v + ffn_bytes * f / h;
  if (rc.framework->activations.attention_output_copy) sharded += act * v;
  // MLA also keeps its latents (query and key/value, with the RoPE key) for the up-projections.
  if (m.mla) replicated += lin * (m.mla->q_lora_rank + m.mla->kv_lora_rank + m.mla->qk_rope_head_dim) / h;
  if (moe_layer && m.moe) {
    // The dense FFN's stored tensors become the experts': r expert passes per token (capacity
    // padding, or dropless the busiest rank's imbalance) and the shared experts, expert_ffn wide,
    // plus the dispatched expert inputs.
    // The expert rows this GPU holds: the routed copies of its expert-tensor-parallel group's
    // tokens (roofline.cpp layer_times), etp x the rank's sequence shard under sequence
    // parallelism, else the whole micro-batch's; stated in units of the tokens / t below.
    // A checkpointed MoE block (recompute_modules.moe) keeps none of it, only its input.
    const double r = m.moe->routed_factor();
    const double fe = m.expert_ffn();
    const double rows = r * (moe_routes_own_tokens(*rc.framework, p) ? double(p.etp()) : t);
    const double kept = moe_checkpointed ? 0.0 : 1.0;
    sharded += kept * (lin * rows + (r * expert_ffn_bytes + m.moe->shared_experts * shared_ffn_bytes) * fe / h) -
               f * ffn_bytes / h;
    replicated += kept * 4.0 * m.moe->experts / h;  // fp32 router logits, 4 * tokens * experts
  }
  Bytes bytes(sbh * (replicated / replicated_div + sharded / t));
  if (p.recompute == Recompute::none) {
    if (fused_attention(rc))
      bytes += Bytes(4.0 * heads * tokens * b / t);  // fp32 softmax statistics per head and query
    else
      bytes += Bytes(unfused_core_bytes(rc, m) * heads * attention_area * b / t);
  }
  return bytes;
}

Bytes layer_bytes_for_plan(const ExecutionModel& rc, const ModelSpec& m, const PlanSpec& p, int layer) {
  const bool moe = m.is_moe_layer(layer);
  if (p.schedule == Schedule::terapipe && !p.token_slices.empty())
    return terapipe_activation_bytes_per_layer(rc, m, p, p.micro_batch, p.token_slices, moe);
  return activation_bytes_per_layer(rc, m, p, p.micro_batch, p.local_tokens(m), moe);
}

bool is_last_stage(const PlanSpec& p, int stage) { return p.holds_last_segment(stage); }

}  // namespace

// ---- Korthikanti 2022, literally ----------------------------------------------------------------

Bytes activations_no_parallelism(double s, double b, double h, double a) {
  return Bytes(s * b * h * (34.0 + 5.0 * a * s / h));
}

Bytes activations_tensor_parallel(double s, double b, double h, double a, double t) {
  return Bytes(s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)));
}

Bytes activations_tensor_sequence_parallel(double s, double b, double h, double a, double t) {
  return Bytes(s * b * h * (34.0 / t + 5.0 * a * s / (h * t)));
}

Bytes activations_tensor_parallel_selective(double s, double b, double h, double t) {
  return Bytes(s * b * h * (10.0 + 24.0 / t));
}

Bytes activations_tensor_sequence_parallel_selective(double s, double b, double h, double t) {
  return Bytes(s * b * h * (34.0 / t));
}

Bytes activations_full_recompute(double s, double b, double h) { return Bytes(s * b * h * 2.0); }

Bytes first_stage_activations_eq5(double s, double b, double h, double a, double t, double L) {
  return Bytes(s * b * h * L / t * (34.0 + 5.0 * a * s / h));
}

double interleaved_activation_factor(int p, int v) {
  return 1.0 + double(p - 1) / (double(p) * v);
}

Bytes embedding_and_output_activations_sec43(double s, double b, double h, double v, double t,
                                             int p) {
  const double dropout = s * b * h * p / t;                                     // sbhp/t
  const double output = (p == 1) ? 4.0 * s * b * h / t * (1.0 + v / h) : 0.0;  // 4sbh/t(1+v/h)
  return Bytes(dropout + output);
}

// ---- Generalised per-layer activations ----------------------------------------------------------

Bytes activation_bytes_per_layer(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                 int micro_batch, int seq, bool moe_layer) {
  return layer_bytes(x, model, plan, micro_batch, seq, double(seq) * seq, moe_layer);
}

Bytes terapipe_activation_bytes_per_layer(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                          int micro_batch, const std::vector<int>& slices, bool moe_layer) {
  Bytes sum;
  double context = 0;
  for (int l : slices) {
    FORESIGHT_CHECK(l > 0) << "token slice of length " << l;
    context += l;  // slice i attends to every token up to and including its own
    sum += layer_bytes(x, model, plan, micro_batch, l, double(l) * context, moe_layer);
  }
  return sum;
}

Bytes recompute_working_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                              int micro_batch, int seq) {
  switch (plan.recompute) {
    case Recompute::none: return Bytes(0);
    case Recompute::selective:
      // The attention core comes back for one layer's backward (fused kernels store almost none).
      if (fused_attention(x)) return Bytes(4.0 * model.heads * double(seq) * micro_batch / plan.tp);
      return Bytes(unfused_core_bytes(x, model) * model.heads * double(seq) * seq * micro_batch / plan.tp);
    case Recompute::full:
    case Recompute::selective_op: {
      // The block's forward re-runs before its backward: one layer's whole activations come back at
      // once, less what the stash already holds for that layer (the checkpointed input; under the
      // per-op policy also the outputs it saved), which the re-run reads instead of rebuilding.
      PlanSpec whole = plan;
      whole.recompute = Recompute::none;
      auto rebuilt = [&](bool moe_layer) {
        return activation_bytes_per_layer(x, model, whole, micro_batch, seq, moe_layer) -
               activation_bytes_per_layer(x, model, plan, micro_batch, seq, moe_layer);
      };
      const bool has_moe = model.moe_layers() > 0;
      return max(rebuilt(false), rebuilt(has_moe));
    }
  }
  return Bytes(0);
}

int microbatches_in_flight(const PlanSpec& plan, int micro_batches, int stage) {
  FORESIGHT_CHECK(stage >= 0 && stage < plan.pp) << "stage " << stage << " of pp " << plan.pp;
  FORESIGHT_CHECK(micro_batches >= 1) << "micro_batches " << micro_batches;
  const int p = plan.pp, m = micro_batches;
  switch (plan.schedule) {
    case Schedule::gpipe:
    case Schedule::terapipe: return m;
    // Without a pipeline, EP overlap runs a micro-batch's forward beside the previous one's
    // backward: two in flight.
    case Schedule::one_f_one_b: return std::min(p - stage + (plan.ep_overlap && p == 1 ? 1 : 0), m);
    // Zero bubble H1 keeps 1F1B's warm-up; a deferred weight pass holds its micro-batch's linear
    // inputs and output gradients until it runs, and stage s defers at most s of them while
    // holding p - s forwards (sail-sg/zero-bubble-pipeline-parallelism, branch zb-h1-quick-start:
    // "delay W by rank"): counted whole, p units at most, as the paper's 1F1B-equal memory.
    case Schedule::zb_h1: return std::min(p, m);
    // DualPipe: pp + 1 model chunks' forwards at the peak on every stage (its two chunks
    // together; deepseek-ai/DualPipe README, "Activation Per Device: PP+1").
    case Schedule::dualpipe: return std::min(p + 1, m);
    case Schedule::interleaved: {
      const int v = std::max(1, plan.virtual_stages);
      // Megatron-Core's EP overlap schedules one more warm-up micro-batch (its combined 1F1B pairs
      // a forward with a backward; schedules.get_pp_rank_microbatches).
      const int warmup = (p - stage - 1) * 2 + (v - 1) * p + (plan.ep_overlap ? 1 : 0);
      return std::min(warmup + 1, m * v);
    }
  }
  return m;
}

double layers_per_in_flight_unit(const ModelSpec& model, const PlanSpec& plan) {
  // The stage with the most layers (the MTP modules' among them, chunk_layers), its chunks' mean (a
  // unit is one chunk's forward).
  double per_stage = 0;
  for (int s = 0; s < plan.pp; ++s) per_stage = std::max(per_stage, double(stage_layers(model, plan, s).size()));
  return per_stage / plan.model_chunks();
}

namespace {
// Appends chunk `chunk` of `stage`'s layers to `layers`, from the plan's chunk_layer_counts.
void append_chunk_layers(const ModelSpec& model, const PlanSpec& plan, const std::vector<int>& counts, int stage,
                         int chunk, std::vector<int>& layers) {
  const int segment = plan.chunk_segment(stage, chunk);
  FORESIGHT_CHECK(segment >= 0 && segment < int(counts.size())) << "stage " << stage << " chunk " << chunk;
  const int first = std::accumulate(counts.begin(), counts.begin() + segment, 0);
  for (int l = first; l < first + counts[std::size_t(segment)]; ++l) layers.push_back(l);
  // The MTP modules' layers follow the head's segment (ModelSpec::mtp_layers).
  if (segment == int(counts.size()) - 1)
    for (int l = model.layers; l < model.transformer_layers(); ++l) layers.push_back(l);
}
}  // namespace

std::vector<int> chunk_layers(const ModelSpec& model, const PlanSpec& plan, int stage, int chunk) {
  std::vector<int> layers;
  append_chunk_layers(model, plan, chunk_layer_counts(model, plan), stage, chunk, layers);
  return layers;
}

std::vector<int> stage_layers(const ModelSpec& model, const PlanSpec& plan, int stage) {
  // The counts once for all chunks (a DeepSpeed partition_method recomputes its partition per call).
  const std::vector<int> counts = chunk_layer_counts(model, plan);
  std::vector<int> layers;
  for (int c = 0; c < plan.model_chunks(); ++c) append_chunk_layers(model, plan, counts, stage, c, layers);
  return layers;
}


Bytes input_embedding_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                       int micro_batch, int seq, int in_flight) {
  if (!model.stores_dropout_masks(x.framework->activations.dropout)) return Bytes(0);
  const double div = sequence_parallel(plan) ? plan.tp : 1.0;
  return Bytes(double(seq) * micro_batch * model.hidden * in_flight / div);  // 1-byte masks
}

Bytes output_layer_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                    int micro_batch, int seq) {
  const double sb = double(seq) * micro_batch;
  const double div = sequence_parallel(plan) ? plan.tp : 1.0;
  const double norm_and_projection_inputs = (x.bytes.residual + x.bytes.activation) * sb * model.hidden / div;
  // A compiled loss (plan.compile_loss) keeps only the bf16 logits it reads and the bf16 gradient
  // it writes: Inductor fuses the fp32 upcast, log-softmax and NLL into one kernel each way and
  // saves the 16-bit input rather than the fp32 intermediates (min-cut recomputation).
  // Transformer Engine's fused loss (plan.cross_entropy_fusion te) writes the gradient over the
  // 16-bit logits in place and keeps nothing else; Megatron-Core's native fusion saves the fp32
  // softmax, as the unfused path does (logits_bytes). PyTorch's loss_parallel (FrameworkTraits::
  // dtensor_loss_parallel, tp > 1) peaks in its backward with four fp32 tensors of the logits'
  // shape: the saved log-softmax, the one-hot grad_input, exp of the first and their sum (then
  // the sum and its product with the loss gradient: _nll_loss_and_log_softmax_backward).
  const bool loss_parallel = x.framework->dtensor_loss_parallel && plan.tp > 1;
  const double per_logit = plan.compile_loss                                        ? 2.0 * x.bytes.activation
                           : plan.cross_entropy_fusion == CrossEntropyFusion::te ? x.bytes.activation
                           : loss_parallel                                        ? 16.0
                                                                                  : x.framework->activations.logits_bytes;
  const double logits = per_logit * sb * model.vocab / plan.tp;
  return Bytes(norm_and_projection_inputs + logits);
}

// ---- Parameters and model state -----------------------------------------------------------------

double layer_gather_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, double element) {
  if (!plan.fp8_param_gather || x.fp8_scaling == Fp8Scaling::mxfp8) return element;
  const double norms = double(model.norms_per_layer()) * norm_parameters(model);
  const double weights = linear_layer_parameters(model) / double(plan.tp);
  const double norm_share = norms + weights > 0 ? norms / (norms + weights) : 0.0;
  return norm_share * element + (1.0 - norm_share) * 1.0;
}

StageParameters layer_parameters_on_gpu(const ModelSpec& model, const PlanSpec& plan, int layer) {
  const double t = plan.tp, h = model.hidden;
  StageParameters p;
  if (model.is_moe_layer(layer)) {
    // Routed experts shard over ep and the experts' tensor parallelism (plan.etp(): tp unless
    // folded); shared experts are dense, tensor-parallel only.
    const double experts = model.moe->experts * expert_ffn_parameters(model);
    const double shared = model.moe->shared_experts * expert_ffn_parameters(model);
    const double router = h * model.moe->experts;
    p.dense = (dense_layer_parameters(model) - ffn_parameters(model) + shared) / t + router;
    p.expert = experts / (double(plan.ep) * plan.etp());
  } else {
    p.dense = dense_layer_parameters(model) / t;
  }
  return p;
}

StageParameters stage_layer_parameters(const ModelSpec& model, const PlanSpec& plan, int stage) {
  StageParameters sum;
  for (int l : stage_layers(model, plan, stage)) {
    const StageParameters p = layer_parameters_on_gpu(model, plan, l);
    sum.dense += p.dense;
    sum.expert += p.expert;
  }
  return sum;
}

bool last_stage_holds_tied_copy(const FrameworkTraits& framework, const ModelSpec& model, const PlanSpec& plan) {
  return framework.has_embedding_and_head && model.tie_embeddings && plan.pp > 1 && framework.last_stage_embedding_copy;
}

StageParameters parameters_on_gpu(const FrameworkTraits& framework, const ModelSpec& model, const PlanSpec& plan,
                                  int stage) {
  FORESIGHT_CHECK(stage >= 0 && stage < plan.pp) << "stage " << stage << " of pp " << plan.pp;
  const double t = plan.tp, h = model.hidden;
  StageParameters p;
  for (int layer : stage_layers(model, plan, stage)) {
    const StageParameters l = layer_parameters_on_gpu(model, plan, layer);
    p.dense += l.dense;
    p.expert += l.expert;
  }
  if (!framework.has_embedding_and_head) return p;
  const double word_embedding = double(model.vocab) * h / t;
  const double positions = model.position == PositionEmbedding::learned ? double(model.seq_len) * h : 0.0;
  if (plan.holds_first_segment(stage)) p.dense += word_embedding + positions;
  if (is_last_stage(plan, stage)) {
    if (!model.tie_embeddings) p.dense += word_embedding;  // the LM head's own matrix
    else if (last_stage_holds_tied_copy(framework, model, plan)) p.dense += word_embedding;  // tied copy
    p.dense += norm_parameters(model);                                                      // final norm
    if (model.mtp_layers > 0) {
      // The MTP modules beside their layers (stage_layers holds those): the projection, column-
      // parallel over tp, and three norms each; and the embedding they read, which a last stage
      // that does not hold the first segment keeps a copy of (Megatron-Core's GPTModel builds its
      // embedding where mtp_process is set), unless the tied copy is already there.
      p.dense += model.mtp_layers * (mtp_projection_parameters(model) / t + 3.0 * norm_parameters(model));
      const bool has_copy = last_stage_holds_tied_copy(framework, model, plan);
      if (!plan.holds_first_segment(stage) && !has_copy) p.dense += word_embedding + positions;
    }
  }
  return p;
}

StateBytesPerParam state_bytes_per_param(const ElementSizes& bytes, int zero, double shard_ways) {
  FORESIGHT_CHECK(zero >= 0 && zero <= 3) << "zero " << zero;
  FORESIGHT_CHECK(shard_ways >= 1) << "shard_ways " << shard_ways;
  StateBytesPerParam s{.weights = bytes.weight + bytes.weight_copy,
                       .grads = bytes.grad,
                       .optimizer = bytes.master + bytes.main_grad_copy + bytes.moments};
  if (zero >= 1) s.optimizer /= shard_ways;
  if (zero >= 2) s.grads /= shard_ways;
  s.grads += bytes.accumulation_buffer;  // unsharded (BF16_Optimizer's fp32 gradients)
  if (zero >= 3) s.weights /= shard_ways;
  return s;
}

// ---- Activations, buffers and the total ---------------------------------------------------------

Bytes layer_activation_bytes_per_unit(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan,
                                      int stage) {
  const int v = plan.model_chunks();
  // Block recompute (plan.recompute_layers): the layers past the first N of each chunk store
  // everything, as without recompute.
  std::optional<PlanSpec> kept;
  if (plan.recompute == Recompute::full && plan.recompute_layers > 0) {
    kept = plan;
    kept->recompute = Recompute::none;
  }
  Bytes all_layers;
  for (int c = 0; c < v; ++c) {
    const std::vector<int> layers = chunk_layers(model, plan, stage, c);
    for (int i = 0; i < int(layers.size()); ++i) {
      // (An MTP module's layer is recomputed under the uniform method only: core/plan.cpp.)
      const bool stores_all = kept && (layers[i] >= model.layers || !recomputes_position(plan, i));
      all_layers += layer_bytes_for_plan(x, model, stores_all ? *kept : plan, layers[i]);
    }
  }
  return all_layers / double(v);
}

Bytes stashed_layer_activation_bytes(const ExecutionModel& x, const ModelSpec& model,
                                     const TrainingSpec& training, const PlanSpec& plan, int stage) {
  const int m = plan.micro_batches(training);
  const int in_flight = microbatches_in_flight(plan, m, stage);
  if (plan.partial_recompute_microbatches > 0 && plan.recompute == Recompute::full) {
    // Micro-batch-level recompute: the in-flight micro-batches are consecutive, so min(K, in
    // flight) of them are partial ones (block recompute) and the rest recompute every layer.
    const int partial = std::min(plan.partial_recompute_microbatches, in_flight);
    PlanSpec whole = plan;
    whole.recompute_layers = 0;
    return layer_activation_bytes_per_unit(x, model, plan, stage) * double(partial) +
           layer_activation_bytes_per_unit(x, model, whole, stage) * double(in_flight - partial);
  }
  return layer_activation_bytes_per_unit(x, model, plan, stage) * double(in_flight);
}

int deferred_head_wgrad_micro_batches(const PlanSpec& plan, int micro_batches) {
  if (!plan.defer_embedding_wgrad) return 0;
  return plan.wgrad_deferral_limit > 0 ? std::min(plan.wgrad_deferral_limit, micro_batches) : micro_batches;
}

Bytes stage_activation_bytes(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                             const PlanSpec& plan, int stage) {
  const int m = plan.micro_batches(training), b = plan.micro_batch, s = plan.local_tokens(model);
  const double offloaded = std::clamp(plan.offload.activations, 0.0, 1.0);
  Bytes bytes = stashed_layer_activation_bytes(x, model, training, plan, stage) * (1.0 - offloaded);
  // With activation offload, one unit is staged on the device while it streams in or out; where
  // the framework moves each layer's checkpoint on its own (FrameworkTraits::
  // activation_offload_per_layer), two layers' (one going out, one coming back). Transformer
  // Engine's windows (activation_offload_windows) free each layer's copy as its window ends, so
  // none is staged when the forward ends; the backward's first reload (one layer) is allocated
  // once the loss's buffers are freed, and counts only beyond them (below).
  Bytes reload;
  if (offloaded > 0) {
    const Bytes unit = layer_activation_bytes_per_unit(x, model, plan, stage);
    const double layers = std::max(1.0, layers_per_in_flight_unit(model, plan));
    if (x.framework->activation_offload_windows)
      reload = unit / layers;
    else
      bytes += (x.framework->activation_offload_per_layer ? unit * std::min(1.0, 2.0 / layers) : unit) * offloaded;
  }

  const bool all_forwards_first = plan.schedule == Schedule::gpipe || plan.schedule == Schedule::terapipe;
  const bool edges = x.framework->has_embedding_and_head;
  if (plan.holds_first_segment(stage) && edges) {
    // Micro-batches whose embedding output is alive: as many as stage 0 holds (Korthikanti's p);
    // interleaved: those in the first model chunk, at most min(m, pp) at the peak; DualPipe: the
    // end stage's forwards of the direction it feeds (pp - 1 warm-up forwards, one more in steady
    // state; dualpipe.py step 1/2).
    const int in_flight = plan.schedule == Schedule::interleaved || plan.schedule == Schedule::dualpipe
                              ? std::min(m, plan.pp)
                              : microbatches_in_flight(plan, m, 0);
    bytes += input_embedding_activation_bytes(x, model, plan, b, s, in_flight);
  }
  if (is_last_stage(plan, stage) && edges) {
    // Each MTP module keeps its own head's (output_layer_activation_bytes) and the inputs of its
    // two norms and of its projection (h, h and 2h per token); its layer is among the stage's.
    const double div = sequence_parallel(plan) ? plan.tp : 1.0;
    const Bytes mtp_inputs(4.0 * x.bytes.activation * double(s) * b * model.hidden / div);
    const Bytes per_micro_batch = output_layer_activation_bytes(x, model, plan, b, s) * double(1 + model.mtp_layers) +
                                  mtp_inputs * double(model.mtp_layers);
    Bytes loss_buffers = per_micro_batch * double(all_forwards_first ? m : 1);
    // torch.distributed.pipelining's last stage keeps every micro-batch's output, the 16-bit
    // logits (vocabulary-sharded under TP's loss parallelism), until the step's merge
    // (FrameworkTraits::pp_keeps_stage_outputs): at the last backward all m of them.
    if (x.framework->pp_keeps_stage_outputs && plan.pp > 1) {
      const double vocab_shard = x.framework->dtensor_loss_parallel ? double(plan.tp) : 1.0;
      loss_buffers += Bytes(x.bytes.activation * double(m) * b * double(s) * model.vocab / vocab_shard);
    }
    // Megatron-Core's deferred head weight gradients (plan.defer_embedding_wgrad): each deferred
    // micro-batch keeps the logits' 16-bit gradient and the head's input until the flush.
    loss_buffers += Bytes(x.bytes.activation * double(deferred_head_wgrad_micro_batches(plan, m)) * b * double(s) *
                          (double(model.vocab) / plan.tp + double(model.hidden) / div));
    bytes += loss_buffers;
    reload = max(Bytes(0), reload - loss_buffers);
  }
  bytes += reload;
  bytes += recompute_working_bytes(x, model, plan, b, s);
  return bytes;
}

Bytes deepep_buffer_bytes(const ModelSpec& model, const PlanSpec& plan) {
  if (plan.ep_dispatcher != EpDispatcher::deepep || !model.moe || plan.ep < 2) return Bytes(0);
  const int ranks = plan.etp() * plan.ep;  // Megatron-Core's tp_ep_group
  // Receive-queue depths (tokens per channel), the larger of the dispatch and combine
  // configurations' (get_dispatch_config / get_combine_config, as Megatron-Core's get_buffer takes
  // the larger hint): NVLink 256 up to 8 ranks, 288 up to 64, then 480, 560, 720; RDMA 128, rounded
  // up to a multiple of the send chunk by Config's constructor: 140 at 16 ranks (chunk 20), 132
  // from 96 on (chunk 12).
  const double nvl_tokens = ranks <= 8 ? 256 : ranks <= 64 ? 288 : ranks <= 96 ? 480 : ranks <= 128 ? 560 : 720;
  const double rdma_tokens = ranks == 16 ? 140 : ranks >= 96 ? 132 : 128;
  const double channels = 20 / 2;  // Buffer.num_sms = 20, two SMs per channel
  const double nvl_peers = 8;      // NUM_MAX_NVL_PEERS
  const double rdma_ranks = std::max(1.0, ranks / nvl_peers), nvl_ranks = std::min(double(ranks), nvl_peers);
  const double hidden_bytes = double(model.hidden) * 2;  // max(element size, 2) for bf16 or FP8 rows
  // Per queued token: its row, the source metadata (8 bytes), 128 top-k indices (int64), 128
  // weights and 128 scales (fp32).
  const double per_token = hidden_bytes + 8 + 128 * 8 + 128 * 4 + 128 * 4;
  double nvl = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * nvl_tokens * per_token;
  double rdma = 0;
  if (ranks > nvl_peers)  // send and receive halves, with an int4 per token
    rdma = channels * rdma_ranks * (nvl_peers * 2 + 2) * 2 * 4 + channels * rdma_ranks * rdma_tokens * (per_token + 16) * 2;
  auto align = [](double b) { return std::ceil(b / 128) * 128; };
  return Bytes(align(nvl) + align(rdma));
}

namespace {
/// Elements of the largest single parameter tensor a GPU of `stage` holds: the word embedding or
/// untied head (vocab x hidden / tp) where the stage has one, else a layer's fused QKV or FC1
/// (gate and up fused where gated) weight over tp.
double largest_parameter_elements(const FrameworkTraits& fw, const ModelSpec& model, const PlanSpec& plan, int stage) {
  const double h = model.hidden, tp = plan.tp;
  double largest = std::max((model.q_width() + 2.0 * model.kv_width()) * h, (model.gated() ? 2.0 : 1.0) * model.ffn_hidden * h) / tp;
  const bool edges = fw.has_embedding_and_head && (stage == 0 || is_last_stage(plan, stage));
  if (edges) largest = std::max(largest, double(model.vocab) * h / tp);
  return largest;
}

/// The gradient reduction's buckets on a GPU of stage `stage`.
Bytes reduction_bucket_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, int stage) {
  const FrameworkTraits& fw = *x.framework;
  Bytes bytes;
  const double bucket_elements = fw.reduce_bucket_elements(plan);
  // Reduction buckets allocated whole, on one GPU too (DeepSpeed's ZeRO-1/2 ipg_buffer: its
  // optimizer's backward allocates them whether or not there is anyone to reduce with). Under a
  // pipeline only the last stage calls the optimizer's backward; the others allocate theirs in
  // reduce_gradients after the pipeline's flush, their activations freed by then.
  const bool moe = model.moe_layers() > 0;
  if (const int whole = fw.whole_reduce_buckets(plan, moe); whole > 0) {
    if (plan.pp == 1 || is_last_stage(plan, stage)) bytes += Bytes(whole * bucket_elements * x.bytes.grad);
  } else if (plan.grad_ranks() > 1) {
    const StageParameters params = parameters_on_gpu(fw, model, plan, stage);
    const Bytes all_grads(params.total() * x.bytes.grad);
    // The framework's extra gradient bucket (none where it reduces its grad buffer in place).
    if (fw.dp_bucket_bytes > 0) bytes += min(Bytes(fw.dp_bucket_bytes), all_grads);
    // A bucket flattened from the gradients there are (under ZeRO-3 a framework with reduction
    // buckets holds its bucket with the gathered units below).
    if (fw.dp_bucket_elements > 0 && !(plan.zero >= 3 && fw.zero3_reduce_bucket_elements > 0))
      bytes += min(Bytes(bucket_elements * x.bytes.grad), all_grads);
  }
  return bytes;
}

/// Context parallelism's keys and values in flight on a GPU (plan.cp > 1), added into `bytes` term
/// by term (the order buffer_bytes always summed them in).
void add_cp_exchange_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, Bytes& bytes) {
  const FrameworkTraits& fw = *x.framework;
  const double a = x.bytes.activation;
  // Keys and values in flight: the ring's send and receive blocks, double-buffered, or the
  // all-gathered keys and values of the whole sequence for one layer. PyTorch's SDPA context
  // parallelism sees them after repeat_kv (a head per query head) and, in the backward, also
  // holds their fp32 gradients: the accumulator and the ring's in-flight copy.
  const bool torch_sdpa = fw.cp_torch_sdpa && !model.mla;
  const double kv = 2.0 * a * plan.micro_batch * plan.local_tokens(model) * cp_kv_width(fw, model, plan);
  if (plan.cp_comm == CpComm::all_to_all || plan.cp_comm == CpComm::all_to_all_ring) {
    // One layer's Q, K and V twice: the head-grouped copies going out and the whole-sequence
    // head groups coming back (the output's exchange, smaller, reuses the space); a2a+p2p's
    // ring then double-buffers its K/V blocks as the plain ring does.
    const double q = a * plan.micro_batch * plan.local_tokens(model) * model.q_width() / plan.tp;
    bytes += Bytes(2.0 * (q + kv));
    if (plan.cp_comm == CpComm::all_to_all_ring) bytes += Bytes(4.0 * kv);
  } else if (plan.cp_comm == CpComm::all_gather) {
    // The whole sequence's keys and values for one layer; Transformer Engine's backward holds
    // them (gathered again) beside whole-sequence dK and dV (AttnFuncWithCPAndKVAllGather).
    bytes += Bytes(kv * plan.cp * (torch_sdpa ? 1.0 : 2.0));
  } else {
    bytes += Bytes(4.0 * kv);
  }
  if (torch_sdpa) bytes += Bytes(2.0 * kv * (4.0 / a));
}

/// ZeRO-3's gathered parameters and unsharded gradients on a GPU of stage `stage` (sharded plans),
/// added into `bytes` term by term.
void add_zero3_gathered_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, int stage,
                              Bytes& bytes) {
  const FrameworkTraits& fw = *x.framework;
  const std::vector<int> layers = stage_layers(model, plan, stage);
  // Gathered units in the compute dtype: the one computing and the one prefetched (FSDP's
  // limit_all_gathers), or with reshard_after_forward off every unit of the stage from its
  // forward to its backward; the unsharded gradient of the unit being reduce-scattered; on the
  // first stage the embedding, which the root unit keeps gathered from forward to backward.
  double largest_layer = 0, stage_layers_params = 0;
  for (int l : layers) {
    // Experts are gathered over their expert-data-parallel group; where that is one rank they
    // stay whole on the GPU (their weights and gradients counted with the stage's state) and
    // nothing of them is gathered or unsharded here.
    const StageParameters lp = layer_parameters_on_gpu(model, plan, l);
    const double n = lp.dense + (plan.expert_dp() > 1 ? lp.expert : 0.0);
    largest_layer = std::max(largest_layer, n);
    stage_layers_params += n;
  }
  const StageParameters on_gpu = parameters_on_gpu(fw, model, plan, stage);
  const double whole_experts = plan.expert_dp() > 1 ? 0.0 : on_gpu.expert;
  // A framework that gathers module by module (DeepSpeed) holds its largest module and the one
  // prefetched (without prefetch, FrameworkTraits::prefetches_zero3, only the one computing), and
  // the gradients of one module with its reduction bucket.
  double largest_unit = largest_layer, bucket_grads = 0;
  if (fw.zero3_unit == Zero3Unit::module) {
    const std::vector<double> shares = zero3_module_shares(fw, model);
    largest_unit = largest_layer * *std::max_element(shares.begin(), shares.end());
    bucket_grads = std::min(fw.reduce_bucket_elements(plan), stage_layers_params) * x.bytes.grad;
  }
  const double in_flight = fw.prefetches_zero3(plan) ? 2.0 : 1.0;
  // (Kept gathered, every unit of the stage is there by the end of its forward: none is left to
  // prefetch.)
  double gathered = plan.reshard_after_forward ? in_flight * largest_unit : stage_layers_params;
  // Parameters kept gathered for the backward within the framework's reuse distance
  // (FrameworkTraits::zero3_reuse_elements, read off the prefetch trace; cost_sharded_parameters
  // skips their re-gather).
  gathered += zero3_reused_parameters(fw, model, plan, stage);
  double unsharded_grads = fw.zero3_unsharded_grad_units * largest_unit * x.bytes.grad + bucket_grads;
  if (fw.fsdp_pipeline_step_sync && plan.pp > 1) {
    // Reduced once per step (FrameworkTraits::fsdp_pipeline_step_sync): every unit stays
    // gathered from its first use to the step's end, and every unit's unsharded gradient
    // accumulates across micro-batches in reduce_dtype (FSDP2's unsharded_accumulated_grad).
    gathered = stage_layers_params;
    unsharded_grads = (on_gpu.total() - whole_experts) * x.bytes.reduce;
  }
  // (The gathered layers hold their GEMM weights in FP8 under plan.fp8_param_gather.)
  bytes += Bytes(gathered * layer_gather_bytes(x, model, plan, x.bytes.gather) + unsharded_grads);
  // All the stage holds beyond its layers (the embedding, the LM head and final norm, the MTP
  // modules' extras): gathered for the whole step where the framework keeps them so
  // (FrameworkTraits::zero3_edges_gathered_per_step); otherwise on the stages holding them, the
  // embedding kept gathered by the root unit from forward to backward and the last stage's head
  // unit (untied matrix or tied copy) while it computes. With one stage both are there at the
  // logits' peak (FSDP's root unit holds the embedding, the norm and the head together).
  const bool edges_kept = fw.zero3_edges_gathered_per_step;
  if (fw.has_embedding_and_head && (edges_kept || plan.holds_first_segment(stage) || is_last_stage(plan, stage)))
    bytes += Bytes((on_gpu.total() - stage_layer_parameters(model, plan, stage).total()) * x.bytes.gather);
}
}  // namespace

Bytes buffer_bytes(const ExecutionModel& x, const ModelSpec& model, const PlanSpec& plan, int stage) {
  const double a = x.bytes.activation;
  const double sbh = double(plan.local_tokens(model)) * plan.micro_batch * model.hidden;
  const double sp_div = sequence_parallel(plan) ? plan.tp : 1.0;
  const std::vector<int> layers = stage_layers(model, plan, stage);
  const bool has_moe = std::any_of(layers.begin(), layers.end(), [&](int l) { return model.is_moe_layer(l); });
  const FrameworkTraits& fw = *x.framework;

  Bytes bytes = reduction_bucket_bytes(x, model, plan, stage);
  // DeepSpeed's stage 1/2 offload keeps a device staging buffer of its largest parameter.
  if (plan.offload.optimizer && fw.offloaded_optimizer_streams_gradients && plan.zero <= 2)
    bytes += Bytes(largest_parameter_elements(fw, model, plan, stage) * x.bytes.grad);
  if (plan.pp > 1) bytes += Bytes(2.0 * a * sbh / sp_div);  // activation and gradient receives
  // The dispatched rows in flight: the rank's copies, all-gathered over expert-TP where each rank
  // routes its own (moe_routes_own_tokens); and DeepEP's queues where it dispatches them.
  if (has_moe)
    bytes += deepep_buffer_bytes(model, plan) + Bytes(2.0 * model.moe->routed_factor() * a * sbh / sp_div *
                   (moe_routes_own_tokens(fw, plan) ? double(plan.etp()) : 1.0));
  if (plan.cp > 1) add_cp_exchange_bytes(x, model, plan, bytes);
  if (plan.zero >= 3 && plan.shard_ways() > 1) add_zero3_gathered_bytes(x, model, plan, stage, bytes);
  return bytes;
}

double cp_kv_width(const FrameworkTraits& fw, const ModelSpec& model, const PlanSpec& plan) {
  if (fw.cp_torch_sdpa && !model.mla) return double(model.heads) / plan.tp * model.head_dim();
  return std::max(model.kv_width() / plan.tp, model.mla ? 0.0 : double(model.head_dim()));
}

Bytes runtime_bytes(const ExecutionModel& x, const PlanSpec& plan, int stage) {
  const bool embedding_group = plan.pp > 1 && (stage == 0 || is_last_stage(plan, stage));
  const int communicators = (plan.tp > 1) + (plan.cp > 1) + (plan.grad_ranks() > 1) + (plan.pp > 1 ? 2 : 0) + (plan.ep > 1) + (embedding_group ? 1 : 0);
  return x.memory.cuda_context + x.memory.nccl_per_communicator * double(communicators);
}

MemoryBreakdown memory_per_gpu(const ExecutionModel& x, const ModelSpec& model, const TrainingSpec& training,
                               const PlanSpec& plan, int stage) {
  const StageParameters params = parameters_on_gpu(*x.framework, model, plan, stage);
  const double expert_dp = plan.expert_dp();
  const StateBytesPerParam dense = state_bytes_per_param(x.bytes, plan.zero, plan.shard_ways());
  const StateBytesPerParam expert = state_bytes_per_param(x.bytes, plan.zero, expert_dp);

  MemoryBreakdown mem;
  mem.weights = Bytes(params.dense * dense.weights + params.expert * expert.weights);
  if (plan.zero >= 3 && x.dtype == Dtype::fp8 && plan.fp8_param_gather && x.framework->fp8_transformer_engine) {
    // Transformer Engine's FP8 parameters under ZeRO-3: each rank's shard of the layers' GEMM
    // weights is stored in FP8 (Megatron-FSDP's uint8 model-weight buffer, rebuilt from the fp32
    // master after each step; param_and_grad_buffer.py), what layer_gather_bytes gathers.
    const double layer_params = stage_layer_parameters(model, plan, stage).dense;
    const double stored = layer_gather_bytes(x, model, plan, x.bytes.weight);
    mem.weights -= Bytes(layer_params * (x.bytes.weight - stored) / plan.shard_ways());
  }
  mem.grads = Bytes(params.dense * dense.grads + params.expert * expert.grads);
  mem.optimizer = plan.offload.optimizer
                      ? Bytes(0)
                      : Bytes(params.dense * dense.optimizer + params.expert * expert.optimizer);
  mem.activations = stage_activation_bytes(x, model, training, plan, stage);
  mem.buffers = buffer_bytes(x, model, plan, stage);
  // ZeRO-Offload: the gradients stream to the host through the reduction bucket (a buffer).
  if (x.framework->streams_gradients_to_host(plan)) mem.grads = Bytes(0);
  if (x.framework->precision.grads_freed_between_steps && plan.micro_batches(training) == 1) {
    // Gradients are created by the backward (as activations are freed) and freed after the step:
    // the peak is the end of the forward (no gradients) or the step (no activations, no
    // autocast copies), whichever is larger.
    ElementSizes stored = x.bytes;
    stored.weight_copy = 0;
    MemoryBreakdown step = mem;
    step.activations = Bytes(0);
    step.weights = Bytes(params.dense * state_bytes_per_param(stored, plan.zero, plan.shard_ways()).weights +
                         params.expert * state_bytes_per_param(stored, plan.zero, expert_dp).weights);
    mem.grads = Bytes(0);
    if (step.allocated() > mem.allocated()) mem = step;
  }
  mem.headroom = mem.allocated() * x.memory.allocator_fragmentation;
  mem.runtime = runtime_bytes(x, plan, stage);
  return mem;
}

std::vector<MemoryBreakdown> memory_per_stage(const ExecutionModel& x, const ModelSpec& model,
                                              const TrainingSpec& training, const PlanSpec& plan) {
  std::vector<MemoryBreakdown> out;
  out.reserve(plan.pp);
  for (int s = 0; s < plan.pp; ++s) out.push_back(memory_per_gpu(x, model, training, plan, s));
  return out;
}

int most_loaded_stage(const std::vector<MemoryBreakdown>& stages) {
  FORESIGHT_CHECK(!stages.empty()) << "no stages";
  int best = 0;
  for (int s = 1; s < int(stages.size()); ++s)
    if (stages[s].total() > stages[best].total()) best = s;
  return best;
}

Bytes memory_shortfall(const MemoryBreakdown& memory, const GpuSpec& gpu) {
  return max(memory.total() - gpu.hbm, Bytes(0));
}

bool fits(const MemoryBreakdown& memory, const GpuSpec& gpu) { return memory.total() <= gpu.hbm; }

std::vector<bool> zero3_kept_layers(const std::vector<double>& layer_params, const std::vector<double>& backward_passes,
                                    double tail, double reuse_elements) {
  std::vector<bool> kept(layer_params.size(), false);
  double forward_after = tail, backward_before = tail;
  for (std::size_t i = layer_params.size(); i-- > 0;) {
    kept[i] = forward_after + backward_before < reuse_elements;
    forward_after += layer_params[i];
    backward_before += layer_params[i] * backward_passes[i];
  }
  return kept;
}

double zero3_reused_parameters(const FrameworkTraits& fw, const ModelSpec& m, const PlanSpec& p, int stage) {
  if (!fw.prefetches_zero3(p) || !(fw.zero3_reuse_elements > 0) || !p.reshard_after_forward || stage != p.pp - 1)
    return 0.0;
  std::vector<double> params, passes;
  for (int l : stage_layers(m, p, stage)) {
    params.push_back(layer_parameters_on_gpu(m, p, l).total());
    passes.push_back(p.recompute == Recompute::full ? 2.0 : 1.0);
  }
  double layers = 0;
  for (double n : params) layers += n;
  // The head (on one stage, the tied embedding the first stage holds).
  const double tail = fw.has_embedding_and_head ? parameters_on_gpu(fw, m, p, stage).total() - layers : 0.0;
  const std::vector<bool> kept = zero3_kept_layers(params, passes, tail, fw.zero3_reuse_elements);
  double reused = 0;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (kept[i]) reused += params[i];
  return reused;
}

std::vector<double> zero3_module_shares(const FrameworkTraits& fw, const ModelSpec& m) {
  if (fw.zero3_unit == Zero3Unit::layer || m.mla || m.moe) return {1.0};
  const double h = m.hidden, f = m.ffn_hidden, up = m.gated() ? 2.0 : 1.0;
  const double w[4] = {h * (m.q_width() + 2.0 * m.kv_width()), m.v_width() * h, up * f * h, f * h};
  const double sum = w[0] + w[1] + w[2] + w[3];
  return {w[0] / sum, w[1] / sum, w[2] / sum, w[3] / sum};
}

std::vector<double> zero3_persistent_vectors(const FrameworkTraits& fw, const ModelSpec& m, const PlanSpec& p) {
  std::vector<double> out;
  if (!(fw.zero3_persistence_elements > 0)) return out;
  const double h = m.hidden, t = p.tp, up = m.gated() ? 2.0 : 1.0;
  auto add = [&](double n) {
    if (n > 0 && n <= fw.zero3_persistence_elements) out.push_back(n);
  };
  for (int i = 0; i < m.norms_per_layer(); ++i) {
    add(h);                                   // weight
    if (m.norm == Norm::layernorm) add(h);    // bias
  }
  if (m.bias) {
    add((m.q_width() + 2.0 * m.kv_width()) / t);
    add(h);
    add(up * m.ffn_hidden / t);
    add(h);
  }
  return out;
}

bool moe_routes_own_tokens(const FrameworkTraits& fw, const PlanSpec& plan) {
  return fw.expert_folding && (plan.tp == 1 || plan.sequence_parallel);
}

}  // namespace foresight::cost_models
