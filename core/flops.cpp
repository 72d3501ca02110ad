#include "core/flops.hpp"

namespace foresight {

namespace {
/// Weights of the attention block: Q (h x h), K and V (h x kv_dim each), output projection (h x h).
double attention_weights(const ModelSpec& m) {
  const double h = m.hidden;
  const double kv_dim = double(m.kv_heads) * m.head_dim();
  return h * (h + 2.0 * kv_dim) + h * h;
}
double attention_biases(const ModelSpec& m) {
  const double kv_dim = double(m.kv_heads) * m.head_dim();
  return (m.hidden + 2.0 * kv_dim) + m.hidden;
}
/// One expert (or the dense FFN): h -> ffn -> h with biases.
double ffn_parameters(const ModelSpec& m) {
  return 2.0 * double(m.hidden) * m.ffn_hidden + m.ffn_hidden + m.hidden;
}
}  // namespace

double dense_layer_parameters(const ModelSpec& m) {
  const double layernorms = 2.0 * 2.0 * m.hidden;  // two layernorms, gain and bias each
  return attention_weights(m) + attention_biases(m) + ffn_parameters(m) + layernorms;
}

double moe_ffn_parameters(const ModelSpec& m) {
  if (!m.moe) return ffn_parameters(m);
  const double router = double(m.hidden) * m.moe->experts;
  return m.moe->experts * ffn_parameters(m) + router;
}

double parameter_count(const ModelSpec& m) {
  const double embeddings = double(m.vocab) * m.hidden + double(m.seq_len) * m.hidden;
  const double final_norm = 2.0 * m.hidden;
  double layers = 0;
  for (int l = 0; l < m.layers; ++l)
    layers += dense_layer_parameters(m) + (m.is_moe_layer(l) ? moe_ffn_parameters(m) - ffn_parameters(m) : 0.0);
  return layers + embeddings + final_norm;
}

double active_parameter_count(const ModelSpec& m) {
  if (!m.moe) return parameter_count(m);
  const double embeddings = double(m.vocab) * m.hidden + double(m.seq_len) * m.hidden;
  const double active_moe_ffn = m.moe->top_k * ffn_parameters(m) + double(m.hidden) * m.moe->experts;
  double layers = 0;
  for (int l = 0; l < m.layers; ++l)
    layers += dense_layer_parameters(m) + (m.is_moe_layer(l) ? active_moe_ffn - ffn_parameters(m) : 0.0);
  return layers + embeddings + 2.0 * m.hidden;
}

Flops attention_core_forward_flops(const ModelSpec& m, double tokens, double seq) {
  return Flops(4.0 * tokens * seq * m.hidden);  // QK^T and AV, 2*tokens*seq*h each
}

Flops layer_forward_flops(const ModelSpec& m, double tokens, double seq, bool moe_layer) {
  const double gemm_weights_attn = attention_weights(m);
  double ffn_weights = 2.0 * double(m.hidden) * m.ffn_hidden;
  double router = 0;
  if (moe_layer && m.moe) {
    ffn_weights *= m.moe->top_k;
    router = double(m.hidden) * m.moe->experts;
  }
  return Flops(2.0 * tokens * (gemm_weights_attn + ffn_weights + router)) +
         attention_core_forward_flops(m, tokens, seq);
}

Flops logits_forward_flops(const ModelSpec& m, double tokens) {
  return Flops(2.0 * tokens * m.hidden * double(m.vocab));
}

namespace {
Flops layers_forward(const ModelSpec& m, double batch) {
  const double tokens = batch * m.seq_len;
  Flops sum;
  for (int l = 0; l < m.layers; ++l) sum += layer_forward_flops(m, tokens, m.seq_len, m.is_moe_layer(l));
  return sum;
}
}  // namespace

Flops model_flops_per_iteration(const ModelSpec& m, double batch) {
  const double tokens = batch * m.seq_len;
  return 3.0 * (layers_forward(m, batch) + logits_forward_flops(m, tokens));
}

Flops hardware_flops_per_iteration(const ModelSpec& m, double batch, Recompute recompute) {
  const Flops model = model_flops_per_iteration(m, batch);
  switch (recompute) {
    case Recompute::none: return model;
    case Recompute::full: return model + layers_forward(m, batch);
    case Recompute::selective:
      return model + attention_core_forward_flops(m, batch * m.seq_len, m.seq_len) * double(m.layers);
  }
  return model;
}

Flops narayanan_eq3_flops(double B, double s, double l, double h, double V) {
  return Flops(96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h)));
}

}  // namespace foresight
