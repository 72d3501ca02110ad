// One pre-LayerNorm GPT decoder layer with Megatron-LM tensor parallelism (Shoeybi et al. 2019,
// sec. 3): the QKV and first MLP GEMMs are column-parallel (each rank holds its heads / its part of
// the FFN), the attention output and second MLP GEMMs are row-parallel, followed by an all-reduce
// over the tensor-parallel group; the backward all-reduces the input gradients of the
// column-parallel GEMMs. Left out for now: sequence parallelism, dropout.
//
//   a = LN1(x); qkv = a Wqkv + bqkv; o = causal_attention(qkv); x1 = x + allreduce(o Wo) + bo
//   c = LN2(x1); g = GeLU(c W1 + b1); out = x1 + allreduce(g W2) + b2
#pragma once

#include "trainer/backend.hpp"
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
  std::int64_t tokens() const { return std::int64_t(batch) * seq; }
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
/// forward and the backward, and the rest is rebuilt by running the forward again.
struct LayerActivations {
  Tensor x;                          // input (N, h)
  Tensor a, mean1, rstd1;            // LN1 output, its statistics (N,1)
  Tensor qkv, probs, attn;           // (N, 3*heads*d), (batch*heads*seq, seq), (N, heads*d)
  Tensor x1;                         // after the attention residual
  Tensor c, mean2, rstd2;            // LN2
  Tensor fc1, gelu;                  // pre-activation and GeLU output (N, ffn)
  Tensor out;                        // layer output (N, h)
  /// Drops everything but the input (full activation recompute).
  void keep_input_only();
};

/// Runs the forward on acts.x (set by the caller) and fills the rest of `acts`.
void layer_forward(Backend& be, Communicator& tp, const LayerDims& dims, const LayerTensors& w,
                   LayerActivations& acts);

/// Accumulates parameter gradients into `grads` and returns dL/dx (N, h) for dL/dout = dout.
Tensor layer_backward(Backend& be, Communicator& tp, const LayerDims& dims, const LayerTensors& w,
                      const LayerTensors& grads, const LayerActivations& acts, const Tensor& dout);

}  // namespace foresight::trainer
