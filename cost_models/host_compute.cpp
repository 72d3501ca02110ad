// The trainer's per-layer, edge and optimizer work on a CPU device, op by op as trainer/layer.cpp,
// trainer/gpt.cpp and trainer/optimizer.cpp call the backend, each op priced by HostOps from the
// host's calibration profile. Communication is not here: the engines price the TP, pipeline and DP
// collectives through the communication model (which uses the profile's MPI fits in the host).
#include "cost_models/host_compute.hpp"

#include <cmath>

#include "core/error.hpp"

namespace foresight::cost_models {

namespace {

/// Accumulates op times into one LayerOpTimes field at a time.
struct Pricer {
  const HostOps& ops;
  Seconds zeros(double rows, double cols) const { return ops.op("zeros", rows * cols); }
  Seconds op(const char* name, double units) const { return ops.op(name, units); }
  Seconds mm(MatmulVariant v, double m, double n, double k) const { return ops.matmul(v, m, n, k); }
};

/// Causal (query, key) pairs of `seq` queries after `past` cached positions.
double causal_pairs(double seq, double past) { return seq * past + seq * (seq + 1) / 2; }

}  // namespace

LayerTimes host_layer_times(const HostOps& ops, const ModelSpec& m, const PlanSpec& p, int tokens, int context,
                            bool moe_layer) {
  FORESIGHT_CHECK(!moe_layer || m.moe) << "MoE layer without an MoE spec";
  const Pricer P{ops};
  const double t = p.tp, b = p.micro_batch, S = tokens, C = context, past = C - S;
  const double N = b * S, H = m.hidden, D = m.head_dim(), heads = double(m.heads) / t, HD = heads * D;
  const double F = double(m.ffn_hidden) / t;
  const bool sp = p.sequence_parallel && t > 1;
  const double n = sp ? N / t : N;
  // Under sequence parallelism gather_tokens allocates the (N, h) input of each column-parallel
  // GEMM and reduce_tokens the (n, h) shard of each row-parallel output.
  const Seconds gather = sp ? P.zeros(N, H) : Seconds(0);
  const Seconds scatter = sp ? P.zeros(n, H) : Seconds(0);
  const double units_attention = b * heads * causal_pairs(S, past) * D;

  LayerTimes L;
  LayerOpTimes& F_ = L.forward_ops;
  LayerOpTimes& B_ = L.backward_ops;
  // ---- forward (layer_forward)
  // QKV is a Backend::matmul_bias call, FC1 (dense and experts') a matmul_bias_gelu, and FC2's
  // input gradient a matmul_dgelu: priced as the GEMM plus the add_bias, gelu_forward or
  // gelu_backward pass they contain. On the CPU backend those passes run over C while it is in
  // cache (no dearer than the separate ops). Under bf16 on the CUDA backend they are cuBLASLt's
  // epilogues, nearly free, so each call here is overpriced by one or two launch-bound kernels
  // (copy, add and gelu_forward measured about 4.5 us each at the closed loop's sizes in run 1,
  // reports/gpu-2026-11-28): about 1% of its 10-34 ms steps.
  F_.layernorms = 2.0 * (P.zeros(n, H) + 2.0 * P.zeros(n, 1) + P.op("layernorm_forward", n * H));
  F_.qkv = P.zeros(N, 3 * HD) + gather + P.mm(MatmulVariant::nn, N, 3 * HD, H) + P.op("add_bias", N * 3 * HD);
  if (past > 0)  // TeraPipe: the slice's K/V joined to the cached prefix
    F_.qkv += P.zeros(b * C, 3 * HD) + 2.0 * b * P.op("copy", 0.5 * C * 3 * HD);
  // The core, which selective recompute re-runs alone (LayerTimes::recompute_selective).
  F_.attention_core = P.zeros(b * heads * S, C) + P.zeros(N, HD) + P.op("attention_forward", units_attention);
  F_.projection = P.zeros(N, H) + P.mm(MatmulVariant::nn, N, H, HD) + scatter;
  F_.dropout_residual = 2.0 * (P.op("add_bias", n * H) + P.op("add", n * H));
  if (moe_layer) {
    // trainer/moe.cpp: the router GEMM; softmax, top-k and capacity slots on the host (priced as
    // the loss's exponential pass over the (tokens, experts) logits); the dispatch buffer filled
    // by one row gather (the embedding lookup's op); on each rank every (source rank, local expert) pair is a
    // GeLU MLP over `cap` rows, E x cap rows in all (the all-to-alls are the engine's); the
    // weighted combine one gather_rows_weighted of k terms per output element. Backward: the
    // gates' row dots, the k = 1 gather of gate * dy into the slots, and the input gradient's
    // k-term gather back to the tokens.
    const MoeSpec& e = *m.moe;
    const double E = e.experts, K = e.top_k;
    const double cap = std::ceil(e.capacity_factor * N * K / E - 1e-9), rows = E * cap, groups = E;
    const double Fe = double(m.expert_ffn());
    const Seconds host_round_trip = P.op("copy", N * E) + P.op("logits_sum_exp_and_target", N * E);
    F_.moe_router = P.zeros(N, E) + P.mm(MatmulVariant::nn, N, E, H) + host_round_trip;
    F_.moe_permute = P.zeros(rows, H) + P.op("embedding_forward", rows * H) + P.zeros(rows, H) + P.zeros(rows, H) +
                     P.zeros(rows, H) + P.zeros(N, H) + P.op("gather_rows_weighted", N * K * H);
    F_.fc1 = 2.0 * P.zeros(rows, Fe) +
             groups * (P.mm(MatmulVariant::nn, cap, Fe, H) + P.op("add_bias", cap * Fe));
    F_.gelu = groups * P.op("gelu_forward", cap * Fe);
    F_.fc2 = groups * (P.mm(MatmulVariant::nn, cap, H, Fe) + P.op("add_bias", cap * H));
    B_.moe_permute = P.op("row_dots", N * K * H) + P.zeros(rows, H) + P.op("gather_rows_weighted", rows * H) +
                     P.zeros(rows, H) + P.zeros(rows, H) + P.zeros(rows, H) + P.zeros(N, H) +
                     P.op("gather_rows_weighted", N * K * H);
    B_.moe_router = host_round_trip + P.zeros(N, E) + P.op("copy", N * E) + P.mm(MatmulVariant::tn, H, E, N) +
                    P.mm(MatmulVariant::nt, N, H, E);
    B_.fc2 = groups * (P.op("bias_backward", cap * H) + P.mm(MatmulVariant::tn, Fe, H, cap) +
                       P.mm(MatmulVariant::nt, cap, Fe, H));
    B_.gelu = groups * (P.zeros(cap, Fe) + P.op("gelu_backward", cap * Fe) + P.op("bias_backward", cap * Fe));
    B_.fc1 = groups * (P.mm(MatmulVariant::tn, H, Fe, cap) + P.mm(MatmulVariant::nt, cap, H, Fe));
  } else {
    F_.fc1 = P.zeros(N, F) + gather + P.mm(MatmulVariant::nn, N, F, H) + P.op("add_bias", N * F);
    F_.gelu = P.zeros(N, F) + P.op("gelu_forward", N * F);
    F_.fc2 = P.zeros(N, H) + P.mm(MatmulVariant::nn, N, H, F) + scatter;
    // ---- backward of the MLP (layer_backward)
    B_.fc2 = P.op("bias_backward", n * H) + gather + P.mm(MatmulVariant::tn, F, H, N) +
             P.mm(MatmulVariant::nt, N, F, H);
    B_.gelu = P.zeros(N, F) + P.op("gelu_backward", N * F) + P.op("bias_backward", N * F);
    B_.fc1 = gather + P.mm(MatmulVariant::tn, H, F, N) + P.zeros(N, H) + P.mm(MatmulVariant::nt, N, H, F) + scatter;
  }
  // ---- backward of the rest
  B_.layernorms = 2.0 * (P.zeros(n, H) + P.op("layernorm_backward", n * H));
  B_.dropout_residual = 2.0 * P.op("add", n * H) + (sp ? P.zeros(6, H) + 6.0 * P.op("add", H) : Seconds(0));
  B_.projection = P.op("bias_backward", n * H) + gather + P.mm(MatmulVariant::tn, HD, H, N) + P.zeros(N, HD) +
                  P.mm(MatmulVariant::nt, N, HD, H);
  B_.attention_core = P.zeros(N, 3 * HD) + P.op("attention_backward", units_attention);
  if (past > 0)
    B_.attention_core += P.zeros(b * C, 3 * HD) + 2.0 * b * P.op("add", 0.5 * C * 3 * HD);
  B_.qkv = P.op("bias_backward", N * 3 * HD) + gather + P.mm(MatmulVariant::tn, H, 3 * HD, N) + P.zeros(N, H) +
           P.mm(MatmulVariant::nt, N, H, 3 * HD) + scatter;
  return L;
}

EdgeTimes host_edge_times(const HostOps& ops, const ModelSpec& m, const PlanSpec& p, int tokens) {
  const Pricer P{ops};
  const double t = p.tp, N = double(p.micro_batch) * tokens, H = m.hidden, V = double(m.vocab) / t;
  const bool sp = p.sequence_parallel && t > 1;
  const double n = sp ? N / t : N;
  EdgeTimes e;
  // GptStage::forward on the first stage: word rows of this rank's vocabulary range, reduced over
  // the TP group (the collective is the engine's), plus positions.
  e.embedding_forward = P.zeros(N, H) + P.op("embedding_forward", N * H) + (sp ? P.zeros(n, H) : Seconds(0)) +
                        P.op("add_positions", n * H);
  e.embedding_backward = (sp ? P.zeros(N, H) : Seconds(0)) + P.op("positions_backward", N * H) +
                         P.op("embedding_backward", N * H);
  // head_forward: final norm, logits over the rank's vocabulary shard (xf times wte^T), the
  // max and sum-of-exponentials passes; backward: the softmax gradient and both GEMMs.
  e.head_forward = P.zeros(n, H) + 2.0 * P.zeros(n, 1) + P.op("layernorm_forward", n * H) +
                   (sp ? P.zeros(N, H) : Seconds(0)) + P.zeros(N, V) + P.mm(MatmulVariant::nt, N, V, H) +
                   P.zeros(N, 1) + P.op("logits_row_max", N * V) + P.zeros(N, 2) +
                   P.op("logits_sum_exp_and_target", N * V);
  e.head_weight_grad = P.mm(MatmulVariant::tn, V, H, N);
  e.head_backward = P.zeros(N, V) + P.op("cross_entropy_backward", N * V) + e.head_weight_grad +
                    P.zeros(N, H) + P.mm(MatmulVariant::nn, N, H, V) + (sp ? P.zeros(n, H) : Seconds(0)) +
                    P.zeros(n, H) + P.op("layernorm_backward", n * H) +
                    (sp ? P.zeros(2, H) + 2.0 * P.op("add", H) : Seconds(0));
  return e;
}

Seconds host_optimizer_time(const HostOps& ops, double params, double state_params, int tensors) {
  // trainer.cpp per step: the gradient buffer zeroed (a fill: zeros' per-element cost), the squared
  // norm of every gradient tensor, AdamW on every tensor's part of the optimizer shard, and under
  // ZeRO-1 the shard copied out for the parameter all-gather.
  const Pricer P{ops};
  const double k = std::max(1, tensors);
  Seconds t = Seconds(ops.profile().ops.at("zeros").per_unit_s * params * ops.slowdown()) +
              k * P.op("sum_squares", params / k) + k * P.op("adamw", state_params / k);
  if (state_params < params) t += P.zeros(state_params, 1) + P.op("copy", state_params);
  return t;
}

}  // namespace foresight::cost_models
