// A Mixture-of-Experts FFN (Switch Transformer / GShard style, as DeepSpeed-MoE runs it) with
// expert parallelism: a linear router, softmax, each token routed to its top_k experts (gates
// renormalised over the k picks when k > 1), an expert capacity of ceil(capacity_factor * N * k / E)
// tokens per router call (slots given choice-major, tokens in order; the rest are dropped and pass
// through the residual only), the Switch load-balancing loss, and the experts sharded over the
// expert-parallel group with an all-to-all dispatch and combine. Each expert is a GeLU MLP (h ->
// ffn -> h). The router's softmax, top-k and slot assignment run on the host over the (N, E) logits
// (small: E is tens of experts); the dispatch, the weighted combine and their backward are
// backend ops (a row gather and row dots), so the (N, h) activations never leave the device. With tensor parallelism the caller runs it whole on every rank
// (experts replicated over the group). Left out: tensor-parallel experts, token dropping policies
// other than first come first served, router noise.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/communicator.hpp"

namespace foresight::trainer {

/// Switch Transformer's auxiliary-loss coefficient (Fedus et al. 2021 sec. 2.2).
inline constexpr double kMoeAuxCoefficient = 0.01;

struct MoeDims {
  std::int64_t tokens = 0;  // N, tokens per router call (one micro-batch on this rank)
  int hidden = 0;
  int ffn = 0;              // each expert's inner width
  int experts = 0;          // E, in the whole model
  int top_k = 1;
  int ep = 1;               // expert-parallel degree: experts are dealt out E/ep per rank
  double capacity_factor = 1.0;
  int local_experts() const { return experts / ep; }
  /// Assignments an expert accepts from one router call: ceil(capacity_factor * N * k / E).
  int capacity() const;
};

/// The router (hidden, E) and this rank's experts' weights (or their gradients).
struct MoeTensors {
  Tensor router;
  std::vector<Tensor> w_fc1, b_fc1, w_fc2, b_fc2;  // per local expert: (h,f), (1,f), (f,h), (1,h)
};

/// What the forward keeps for the backward.
struct MoeActivations {
  Tensor input;                      // (N, h), the LayerNorm output routed
  std::vector<double> probs;         // (N, E) router softmax
  std::vector<int> expert, slot;     // (N, k): chosen expert, its capacity slot or -1 (dropped)
  std::vector<double> gate;          // (N, k) combine weights
  std::vector<double> load;          // (E) f_e: share of the N*k choices that picked expert e
  Tensor expert_in;                  // (ep * local * capacity, h) rows received, by source rank
  Tensor fc1, gelu;                  // (ep * local * capacity, ffn)
  Tensor combined_out;               // (E * capacity, h) expert outputs back at this rank
  double aux_loss = 0;               // Switch load-balancing loss of this call (unscaled)
};

/// y (N, h) for the routed `input` (N, h); `ep` is the expert-parallel group (size dims.ep).
Tensor moe_forward(Backend& be, Communicator& ep, const MoeDims& dims, const MoeTensors& w, const Tensor& input,
                   MoeActivations& acts);

/// Accumulates the router's and local experts' gradients into `grads` and returns dL/dinput (N, h)
/// for dL/dy = dy. `aux_scale` weighs the load-balancing loss (its gradient is aux_scale * dL_aux).
Tensor moe_backward(Backend& be, Communicator& ep, const MoeDims& dims, const MoeTensors& w, const MoeTensors& grads,
                    const MoeActivations& acts, const Tensor& dy, double aux_scale);

}  // namespace foresight::trainer
