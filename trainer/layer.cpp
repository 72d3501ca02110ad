#include "trainer/layer.hpp"

namespace foresight::trainer {

void LayerActivations::keep_input_only() {
  Tensor input = x;
  *this = LayerActivations{};
  x = input;
}

void layer_forward(Backend& be, Communicator& tp, const LayerDims& d, const LayerTensors& w,
                   LayerActivations& a) {
  const std::int64_t N = d.tokens(), H = d.hidden, HD = std::int64_t(d.heads) * d.head_dim;
  const AttentionShape shape{.batch = d.batch, .seq = d.seq, .heads = d.heads, .head_dim = d.head_dim};
  a.a = be.zeros(N, H);
  a.mean1 = be.zeros(N, 1);
  a.rstd1 = be.zeros(N, 1);
  be.layernorm_forward(a.a, a.mean1, a.rstd1, a.x, w.ln1_g, w.ln1_b);
  a.qkv = be.zeros(N, 3 * HD);
  be.matmul(a.qkv, a.a, false, w.w_qkv, false, false);
  be.add_bias(a.qkv, w.b_qkv);
  a.probs = be.zeros(std::int64_t(d.batch) * d.heads * d.seq, d.seq);
  a.attn = be.zeros(N, HD);
  be.attention_forward(a.attn, a.probs, a.qkv, shape);
  a.x1 = be.zeros(N, H);
  be.matmul(a.x1, a.attn, false, w.w_o, false, false);
  tp.all_reduce(a.x1, ReduceOp::sum);  // row-parallel: partial sums over this rank's heads
  be.add_bias(a.x1, w.b_o);
  be.add(a.x1, a.x);

  a.c = be.zeros(N, H);
  a.mean2 = be.zeros(N, 1);
  a.rstd2 = be.zeros(N, 1);
  be.layernorm_forward(a.c, a.mean2, a.rstd2, a.x1, w.ln2_g, w.ln2_b);
  a.fc1 = be.zeros(N, d.ffn);
  be.matmul(a.fc1, a.c, false, w.w_fc1, false, false);
  be.add_bias(a.fc1, w.b_fc1);
  a.gelu = be.zeros(N, d.ffn);
  be.gelu_forward(a.gelu, a.fc1);
  a.out = be.zeros(N, H);
  be.matmul(a.out, a.gelu, false, w.w_fc2, false, false);
  tp.all_reduce(a.out, ReduceOp::sum);
  be.add_bias(a.out, w.b_fc2);
  be.add(a.out, a.x1);
}

Tensor layer_backward(Backend& be, Communicator& tp, const LayerDims& d, const LayerTensors& w,
                      const LayerTensors& g, const LayerActivations& a, const Tensor& dout) {
  const std::int64_t N = d.tokens(), H = d.hidden, HD = std::int64_t(d.heads) * d.head_dim;
  const AttentionShape shape{.batch = d.batch, .seq = d.seq, .heads = d.heads, .head_dim = d.head_dim};
  // MLP block. The output bias and the residual see the full (all-reduced) gradient on every rank.
  be.bias_backward(g.b_fc2, dout);
  be.matmul(g.w_fc2, a.gelu, true, dout, false, true);
  Tensor dgelu = be.zeros(N, d.ffn);
  be.matmul(dgelu, dout, false, w.w_fc2, true, false);
  Tensor dfc1 = be.zeros(N, d.ffn);
  be.gelu_backward(dfc1, dgelu, a.fc1);
  be.bias_backward(g.b_fc1, dfc1);
  be.matmul(g.w_fc1, a.c, true, dfc1, false, true);
  Tensor dc = be.zeros(N, H);
  be.matmul(dc, dfc1, false, w.w_fc1, true, false);
  tp.all_reduce(dc, ReduceOp::sum);  // column-parallel input: each rank saw part of the FFN
  Tensor dx1 = be.zeros(N, H);
  be.layernorm_backward(dx1, g.ln2_g, g.ln2_b, dc, a.x1, a.mean2, a.rstd2, w.ln2_g);
  be.add(dx1, dout);

  // Attention block.
  be.bias_backward(g.b_o, dx1);
  be.matmul(g.w_o, a.attn, true, dx1, false, true);
  Tensor dattn = be.zeros(N, HD);
  be.matmul(dattn, dx1, false, w.w_o, true, false);
  Tensor dqkv = be.zeros(N, 3 * HD);
  be.attention_backward(dqkv, dattn, a.probs, a.qkv, shape);
  be.bias_backward(g.b_qkv, dqkv);
  be.matmul(g.w_qkv, a.a, true, dqkv, false, true);
  Tensor da = be.zeros(N, H);
  be.matmul(da, dqkv, false, w.w_qkv, true, false);
  tp.all_reduce(da, ReduceOp::sum);
  Tensor dx = be.zeros(N, H);
  be.layernorm_backward(dx, g.ln1_g, g.ln1_b, da, a.x, a.mean1, a.rstd1, w.ln1_g);
  be.add(dx, dx1);
  return dx;
}

}  // namespace foresight::trainer
