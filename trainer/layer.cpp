#include "trainer/layer.hpp"

#include "core/error.hpp"

namespace foresight::trainer {

void LayerActivations::keep_input_only() {
  Tensor input = x, past = past_kv;
  *this = LayerActivations{};
  x = input;
  past_kv = past;
}

void LayerActivations::drop_attention_core() {
  probs = Tensor{};
  attn = Tensor{};
}

std::vector<Tensor*> LayerActivations::saved() {
  return {&x, &a, &mean1, &rstd1, &past_kv, &qkv, &probs, &attn, &kv, &x1, &c, &mean2, &rstd2, &fc1, &gelu};
}

Tensor gather_tokens(Backend& be, Communicator& tp, const LayerDims& d, const Tensor& x) {
  if (!d.sequence_parallel) return x;
  Tensor full = be.zeros(d.tokens(), x.cols());
  tp.all_gather(full, x);
  return full;
}

Tensor reduce_tokens(Backend& be, Communicator& tp, const LayerDims& d, Tensor partial) {
  if (!d.sequence_parallel) {
    tp.all_reduce(partial, ReduceOp::sum);
    return partial;
  }
  Tensor shard = be.zeros(d.local_tokens(), partial.cols());
  tp.reduce_scatter(shard, partial, ReduceOp::sum);
  return shard;
}

namespace {

AttentionShape attention_shape(const LayerDims& d) {
  return AttentionShape{.batch = d.batch, .seq = d.seq, .heads = d.heads, .head_dim = d.head_dim, .context = d.past + d.seq};
}

/// Rows of sequence b: `count` of them from row b * per_seq + first.
Tensor sequence_rows(const Tensor& t, int b, std::int64_t per_seq, std::int64_t first, std::int64_t count) {
  return t.row_slice(b * per_seq + first, count);
}

/// The tensor the backend's attention saves for the backward (probabilities, or a fused path's
/// log-sum-exp per query), as the backend says.
Tensor attention_saved(Backend& be, const LayerDims& d) {
  const Backend::AttentionSaved s = be.attention_saved(attention_shape(d));
  return s.fp32 ? be.zeros_fp32(s.rows, s.cols) : be.zeros(s.rows, s.cols);
}

}  // namespace

const Tensor& attention_context(const LayerActivations& a) { return a.kv.defined() ? a.kv : a.qkv; }

void layer_forward(Backend& be, Communicator& tp, const LayerDims& d, const LayerTensors& w,
                   LayerActivations& a, const MoeLayer* moe) {
  const std::int64_t N = d.tokens(), n = d.local_tokens(), H = d.hidden, HD = std::int64_t(d.heads) * d.head_dim;
  a.a = be.zeros(n, H);
  a.mean1 = be.zeros_fp32(n, 1);  // LayerNorm statistics stay fp32 under every recipe
  a.rstd1 = be.zeros_fp32(n, 1);
  be.layernorm_forward(a.a, a.mean1, a.rstd1, a.x, w.ln1_g, w.ln1_b);
  a.qkv = be.zeros(N, 3 * HD);
  // Column-parallel: each rank's output columns are complete, so their bias goes in with the GEMM.
  be.matmul_bias(a.qkv, gather_tokens(be, tp, d, a.a), false, w.w_qkv, false, w.b_qkv);
  a.kv = Tensor{};
  if (d.past > 0) {
    // TeraPipe: this slice's queries attend to the cached K/V of the earlier slices, then its own.
    FORESIGHT_CHECK(a.past_kv.rows() == std::int64_t(d.batch) * d.past) << "past K/V rows " << a.past_kv.rows();
    a.kv = be.zeros(std::int64_t(d.batch) * (d.past + d.seq), 3 * HD);
    for (int b = 0; b < d.batch; ++b) {
      be.copy(sequence_rows(a.kv, b, d.past + d.seq, 0, d.past), sequence_rows(a.past_kv, b, d.past, 0, d.past));
      be.copy(sequence_rows(a.kv, b, d.past + d.seq, d.past, d.seq), sequence_rows(a.qkv, b, d.seq, 0, d.seq));
    }
  }
  a.probs = attention_saved(be, d);
  a.attn = be.zeros(N, HD);
  be.attention_forward(a.attn, a.probs, a.qkv, attention_context(a), attention_shape(d));
  Tensor o = be.zeros(N, H);
  be.matmul(o, a.attn, false, w.w_o, false, false);
  a.x1 = reduce_tokens(be, tp, d, o);  // row-parallel: partial sums over this rank's heads
  be.add_bias(a.x1, w.b_o);
  be.add(a.x1, a.x);

  a.c = be.zeros(n, H);
  a.mean2 = be.zeros_fp32(n, 1);
  a.rstd2 = be.zeros_fp32(n, 1);
  be.layernorm_forward(a.c, a.mean2, a.rstd2, a.x1, w.ln2_g, w.ln2_b);
  if (moe) {
    // The experts are replicated over the tensor-parallel group: every rank routes all N tokens
    // (gathered under sequence parallelism, so the capacity is the same as with tp = 1) and keeps
    // its own rows of the result.
    a.moe = std::make_shared<MoeActivations>();
    const Tensor y = moe_forward(be, *moe->ep, moe->dims, moe->values, gather_tokens(be, tp, d, a.c), *a.moe);
    a.out = be.zeros(n, H);
    be.copy(a.out, d.sequence_parallel ? y.row_slice(n * tp.rank(), n) : y);
    be.add(a.out, a.x1);
    return;
  }
  // FC1, its bias and the GeLU in one call; fc1 (the pre-activation) is kept for the backward.
  a.fc1 = be.zeros(N, d.ffn);
  a.gelu = be.zeros(N, d.ffn);
  be.matmul_bias_gelu(a.gelu, a.fc1, gather_tokens(be, tp, d, a.c), false, w.w_fc1, false, w.b_fc1);
  Tensor y = be.zeros(N, H);
  be.matmul(y, a.gelu, false, w.w_fc2, false, false);
  a.out = reduce_tokens(be, tp, d, y);
  be.add_bias(a.out, w.b_fc2);
  be.add(a.out, a.x1);
}

Tensor layer_backward(Backend& be, Communicator& tp, const LayerDims& d, const LayerTensors& w,
                      const LayerTensors& grads, const LayerActivations& a, const Tensor& dout,
                      const Tensor& kv_grad, const MoeLayer* moe) {
  const std::int64_t N = d.tokens(), n = d.local_tokens(), H = d.hidden, HD = std::int64_t(d.heads) * d.head_dim;
  // With sequence parallelism the replicated parameters applied to this rank's tokens get their
  // gradient from those tokens only: collect it apart, sum it over the group, then accumulate. A
  // weight gradient, so fp32 like the main-grad it joins.
  LayerTensors g = grads;
  Tensor seq_grads;
  if (d.sequence_parallel) {
    seq_grads = be.zeros_fp32(6, H);
    g.ln1_g = seq_grads.row_slice(0, 1);
    g.ln1_b = seq_grads.row_slice(1, 1);
    g.b_o = seq_grads.row_slice(2, 1);
    g.ln2_g = seq_grads.row_slice(3, 1);
    g.ln2_b = seq_grads.row_slice(4, 1);
    g.b_fc2 = seq_grads.row_slice(5, 1);
  }
  Tensor dc;
  if (moe) {
    FORESIGHT_CHECK(a.moe) << "MoE backward without its forward";
    // Every tensor-parallel rank holds the whole MoE computation: its gradients are complete on
    // each (counted once in the norm, by tp rank 0), and it needs every token's dL/dy.
    const Tensor dc_full = moe_backward(be, *moe->ep, moe->dims, moe->values, moe->grads, *a.moe,
                                        gather_tokens(be, tp, d, dout), moe->aux_scale);
    dc = d.sequence_parallel ? dc_full.row_slice(n * tp.rank(), n) : dc_full;
  } else {
    // MLP block. The output bias and the residual see the full (reduced) gradient of their tokens.
    be.bias_backward(g.b_fc2, dout);
    const Tensor dout_full = gather_tokens(be, tp, d, dout);
    be.matmul(g.w_fc2, a.gelu, true, dout_full, false, true);
    Tensor dfc1 = be.zeros(N, d.ffn);  // through FC2's input GEMM and the GeLU in one call
    be.matmul_dgelu(dfc1, dout_full, false, w.w_fc2, true, a.fc1);
    be.bias_backward(g.b_fc1, dfc1);
    be.matmul(g.w_fc1, gather_tokens(be, tp, d, a.c), true, dfc1, false, true);
    Tensor dc_partial = be.zeros(N, H);
    be.matmul(dc_partial, dfc1, false, w.w_fc1, true, false);
    dc = reduce_tokens(be, tp, d, dc_partial);  // column-parallel input: each rank saw part of the FFN
  }
  Tensor dx1 = be.zeros(n, H);
  be.layernorm_backward(dx1, g.ln2_g, g.ln2_b, dc, a.x1, a.mean2, a.rstd2, w.ln2_g);
  be.add(dx1, dout);

  // Attention block; the core is rebuilt first under selective recompute.
  Tensor probs = a.probs, attn = a.attn;
  if (!probs.defined()) {
    probs = attention_saved(be, d);
    attn = be.zeros(N, HD);
    be.attention_forward(attn, probs, a.qkv, attention_context(a), attention_shape(d));
  }
  be.bias_backward(g.b_o, dx1);
  const Tensor dx1_full = gather_tokens(be, tp, d, dx1);
  be.matmul(g.w_o, attn, true, dx1_full, false, true);
  Tensor dattn = be.zeros(N, HD);
  be.matmul(dattn, dx1_full, false, w.w_o, true, false);
  Tensor dqkv = be.zeros(N, 3 * HD);
  if (!kv_grad.defined()) {
    be.attention_backward(dqkv, dqkv, dattn, attn, probs, a.qkv, a.qkv, attention_shape(d));
  } else {
    // TeraPipe: gradients of the keys/values of positions 0 .. past+seq go to the shared
    // accumulator; this slice's own rows there (its share plus later slices') join dqkv. Partial
    // sums, so fp32: under bf16 the key/value gradient is rounded once, when it joins dqkv, as
    // without slices.
    const std::int64_t T = kv_grad.rows() / d.batch, C = d.past + d.seq;
    Tensor dkv = be.zeros_fp32(std::int64_t(d.batch) * C, 3 * HD);
    be.attention_backward(dqkv, dkv, dattn, attn, probs, a.qkv, attention_context(a), attention_shape(d));
    for (int b = 0; b < d.batch; ++b) {
      be.add(sequence_rows(kv_grad, b, T, 0, C), sequence_rows(dkv, b, C, 0, C));
      be.add(sequence_rows(dqkv, b, d.seq, 0, d.seq), sequence_rows(kv_grad, b, T, d.past, d.seq));
    }
  }
  be.bias_backward(g.b_qkv, dqkv);
  be.matmul(g.w_qkv, gather_tokens(be, tp, d, a.a), true, dqkv, false, true);
  Tensor da_partial = be.zeros(N, H);
  be.matmul(da_partial, dqkv, false, w.w_qkv, true, false);
  const Tensor da = reduce_tokens(be, tp, d, da_partial);
  Tensor dx = be.zeros(n, H);
  be.layernorm_backward(dx, g.ln1_g, g.ln1_b, da, a.x, a.mean1, a.rstd1, w.ln1_g);
  be.add(dx, dx1);

  if (d.sequence_parallel) {
    tp.all_reduce(seq_grads, ReduceOp::sum);
    const Tensor* parts[6] = {&grads.ln1_g, &grads.ln1_b, &grads.b_o, &grads.ln2_g, &grads.ln2_b, &grads.b_fc2};
    for (int i = 0; i < 6; ++i)
      if (parts[i]->defined()) be.add(parts[i]->reshaped(1, H), seq_grads.row_slice(i, 1));  // MoE: no b_fc2
  }
  return dx;
}

}  // namespace foresight::trainer
