// One pre-LayerNorm GPT decoder layer with Megatron-LM tensor parallelism (Shoeybi et al. 2019,
// sec. 3): the QKV and first MLP GEMMs are column-parallel (each rank holds its heads / its part of
// the FFN), the attention output and second MLP GEMMs are row-parallel, followed by an all-reduce
// over the tensor-parallel group; the backward all-reduces the input gradients of the
// column-parallel GEMMs. With sequence parallelism (Korthikanti et al. 2022 sec. 4.2.2) the
// LayerNorms, biases and residuals run on this rank's 1/tp of the tokens: an all-gather enters each
// column-parallel GEMM and a reduce-scatter replaces each all-reduce (their roles swap in the
// backward), and the gradients of the replicated parameters used there (LayerNorms, b_o, b_fc2),
// computed on a share of the tokens, are summed over the tensor-parallel group. Left out: dropout.
//
//   a = LN1(x); qkv = g(a) Wqkv + bqkv; o = causal_attention(qkv); x1 = x + r(o Wo) + bo
//   c = LN2(x1); f = GeLU(g(c) W1 + b1); out = x1 + r(f W2) + b2
//   g = identity (all-gather with sequence parallelism), r = all-reduce (reduce-scatter)
#pragma once

#include <vector>

#include <memory>

#include "trainer/backend.hpp"
#include "trainer/moe.hpp"
#include "trainer/communicator.hpp"

namespace foresight::trainer {

/// Sizes of one layer on one rank for one micro-batch.
struct LayerDims {
  int batch = 0;       // sequences in the micro-batch
  int seq = 0;
  int hidden = 0;
  int heads = 0;       // heads on this rank (model heads / tp)
  int head_dim = 0;
  int ffn = 0;         // FFN width on this rank (ffn_hidden / tp)
  int tp = 1;          // tensor-parallel degree
  bool sequence_parallel = false;  // LayerNorms and residuals on tokens()/tp tokens per rank
  int past = 0;        // TeraPipe: tokens per sequence of earlier slices, whose K/V this slice attends to
  std::int64_t tokens() const { return std::int64_t(batch) * seq; }
  /// Tokens whose layer input and output this rank holds: all, or its 1/tp with sequence parallelism.
  std::int64_t local_tokens() const { return sequence_parallel ? tokens() / tp : tokens(); }
};

/// The layer's parameters on this rank (values, or gradients with the same shapes).
struct LayerTensors {
  Tensor ln1_g, ln1_b;  // (1, h)
  Tensor w_qkv, b_qkv;  // (h, 3*heads*d), (1, 3*heads*d)
  Tensor w_o, b_o;      // (heads*d, h), (1, h)
  Tensor ln2_g, ln2_b;  // (1, h)
  Tensor w_fc1, b_fc1;  // (h, ffn), (1, ffn)
  Tensor w_fc2, b_fc2;  // (ffn, h), (1, h)
};

/// What the forward keeps for the backward. With full recompute only `x` is kept between the
/// forward and the backward, and the rest is rebuilt by running the forward again; with selective
/// recompute the attention core (probs, attn) is dropped and rebuilt from qkv in the backward.
/// n = local_tokens(), N = tokens().
struct LayerActivations {
  Tensor x;                          // input (n, h)
  Tensor a, mean1, rstd1;            // LN1 output (n, h), its statistics (n,1)
  Tensor past_kv;                    // TeraPipe: earlier slices' K/V (batch*past, 3*heads*d), an input like x
  Tensor qkv, probs, attn;           // (N, 3*heads*d), (batch*heads*seq, past+seq), (N, heads*d)
  Tensor kv;                         // TeraPipe: past_kv then qkv per sequence (batch*(past+seq), 3*heads*d)
  Tensor x1;                         // after the attention residual (n, h)
  Tensor c, mean2, rstd2;            // LN2 (n, h)
  Tensor fc1, gelu;                  // pre-activation and GeLU output (N, ffn)
  Tensor out;                        // layer output (n, h)
  std::shared_ptr<MoeActivations> moe;  // MoE layers: the router's and experts' (fc1, gelu unused)
  /// Drops everything but the inputs x and past_kv (full activation recompute).
  void keep_input_only();
  /// Drops the attention core's softmax and output (selective recompute, Korthikanti 2022 sec. 5).
  void drop_attention_core();
  /// Every member the backward may read (all but `out`), for activation offload.
  std::vector<Tensor*> saved();
};

/// An MoE layer's FFN in place of the dense MLP (whose LayerTensors w_fc1..b_fc2 are then unused):
/// the expert-parallel group, shapes, values and gradients, and the weight of its load-balancing
/// loss in the backward.
struct MoeLayer {
  Communicator* ep = nullptr;
  MoeDims dims;
  MoeTensors values, grads;
  double aux_scale = 0;
};

/// g: this rank's tokens (n, c) -> every token (N, c): an all-gather with sequence parallelism,
/// else the identity.
Tensor gather_tokens(Backend& be, Communicator& tp, const LayerDims& dims, const Tensor& x);
/// r: the sum over the tensor-parallel group of `partial` (N, c), for this rank's tokens (n, c): a
/// reduce-scatter with sequence parallelism, else an in-place all-reduce.
Tensor reduce_tokens(Backend& be, Communicator& tp, const LayerDims& dims, Tensor partial);

/// Runs the forward on acts.x (set by the caller) and fills the rest of `acts`.
void layer_forward(Backend& be, Communicator& tp, const LayerDims& dims, const LayerTensors& w,
                   LayerActivations& acts, const MoeLayer* moe = nullptr);

/// The K/V this layer's attention read (kv, or qkv without earlier slices): what the next
/// TeraPipe slice of the micro-batch attends to as its past_kv.
const Tensor& attention_context(const LayerActivations& acts);

/// Accumulates parameter gradients into `grads` and returns dL/dx (n, h) for dL/dout = dout (n, h).
/// Rebuilds the attention core first when it was dropped. TeraPipe slices pass `kv_grad` (batch*T,
/// 3*heads*d) for T tokens per whole sequence, shared by the micro-batch's slices and run from the
/// last slice back: the key/value gradients later slices left at this slice's positions are added
/// to its own, and this slice's attention adds those of positions 0 .. past+seq.
Tensor layer_backward(Backend& be, Communicator& tp, const LayerDims& dims, const LayerTensors& w,
                      const LayerTensors& grads, const LayerActivations& acts, const Tensor& dout,
                      const Tensor& kv_grad = Tensor{}, const MoeLayer* moe = nullptr);

}  // namespace foresight::trainer
