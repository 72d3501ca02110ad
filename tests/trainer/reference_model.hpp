// An independent float64 implementation of the GPT decoder layer and of the tied-embedding LM
// loss, written as plainly as possible (no backend, no tensor parallelism), for the tests: the
// trainer's fp32 forward is compared with it, and its central finite differences are the
// reference gradients for the trainer's backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace foresight::trainer::test {

using Vec = std::vector<double>;

struct RefDims {
  int batch, seq, hidden, heads, ffn;
  int tokens() const { return batch * seq; }
  int head_dim() const { return hidden / heads; }
};

/// One layer's parameters, full (unsplit), row-major, same layouts as the trainer's full tensors.
struct RefLayer {
  Vec ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2;
  std::vector<Vec*> all() {
    return {&ln1_g, &ln1_b, &w_qkv, &b_qkv, &w_o, &b_o, &ln2_g, &ln2_b, &w_fc1, &b_fc1, &w_fc2, &b_fc2};
  }
};

inline Vec ref_layernorm(const Vec& x, int rows, int cols, const Vec& g, const Vec& b) {
  Vec y(x.size());
  for (int n = 0; n < rows; ++n) {
    double mu = 0, var = 0;
    for (int j = 0; j < cols; ++j) mu += x[n * cols + j] / cols;
    for (int j = 0; j < cols; ++j) var += (x[n * cols + j] - mu) * (x[n * cols + j] - mu) / cols;
    for (int j = 0; j < cols; ++j) y[n * cols + j] = (x[n * cols + j] - mu) / std::sqrt(var + 1e-5) * g[j] + b[j];
  }
  return y;
}

/// y (rows, n) = x (rows, k) w (k, n) + b.
inline Vec ref_linear(const Vec& x, int rows, int k, const Vec& w, int n, const Vec* b) {
  Vec y(std::size_t(rows) * n, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) {
      double s = b ? (*b)[j] : 0.0;
      for (int i = 0; i < k; ++i) s += x[r * k + i] * w[i * n + j];
      y[r * n + j] = s;
    }
  return y;
}

inline double ref_gelu(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

inline Vec ref_layer_forward(const RefDims& d, const RefLayer& p, const Vec& x) {
  const int N = d.tokens(), H = d.hidden, D = d.head_dim();
  const Vec a = ref_layernorm(x, N, H, p.ln1_g, p.ln1_b);
  const Vec qkv = ref_linear(a, N, H, p.w_qkv, 3 * H, &p.b_qkv);
  Vec o(std::size_t(N) * H, 0.0);
  for (int b = 0; b < d.batch; ++b)
    for (int h = 0; h < d.heads; ++h)
      for (int i = 0; i < d.seq; ++i) {
        Vec w(std::size_t(i) + 1);
        double z = 0, mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int e = 0; e < D; ++e)
            s += qkv[(b * d.seq + i) * 3 * H + h * D + e] * qkv[(b * d.seq + j) * 3 * H + H + h * D + e];
          w[j] = s / std::sqrt(double(D));
          mx = std::max(mx, w[j]);
        }
        for (int j = 0; j <= i; ++j) z += (w[j] = std::exp(w[j] - mx));
        for (int e = 0; e < D; ++e) {
          double s = 0;
          for (int j = 0; j <= i; ++j) s += w[j] / z * qkv[(b * d.seq + j) * 3 * H + 2 * H + h * D + e];
          o[(b * d.seq + i) * H + h * D + e] = s;
        }
      }
  Vec x1 = ref_linear(o, N, H, p.w_o, H, &p.b_o);
  for (std::size_t i = 0; i < x1.size(); ++i) x1[i] += x[i];
  const Vec c = ref_layernorm(x1, N, H, p.ln2_g, p.ln2_b);
  Vec f = ref_linear(c, N, H, p.w_fc1, d.ffn, &p.b_fc1);
  for (double& v : f) v = ref_gelu(v);
  Vec out = ref_linear(f, N, d.ffn, p.w_fc2, H, &p.b_fc2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += x1[i];
  return out;
}

/// Mean token cross-entropy of a one-stage GPT: embedding (wte[token] + wpe[pos]), the layers,
/// final LayerNorm and logits against the same wte.
inline double ref_model_loss(const RefDims& d, int vocab, const Vec& wte, const Vec& wpe, const std::vector<RefLayer>& layers,
                             const Vec& lnf_g, const Vec& lnf_b, const std::vector<std::int32_t>& inputs,
                             const std::vector<std::int32_t>& targets) {
  const int N = d.tokens(), H = d.hidden;
  Vec x(std::size_t(N) * H);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H; ++j) x[n * H + j] = wte[inputs[n] * H + j] + wpe[(n % d.seq) * H + j];
  for (const RefLayer& l : layers) x = ref_layer_forward(d, l, x);
  const Vec xf = ref_layernorm(x, N, H, lnf_g, lnf_b);
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    Vec logit(std::size_t(vocab), 0.0);
    double mx = -1e300, z = 0;
    for (int v = 0; v < vocab; ++v) {
      for (int j = 0; j < H; ++j) logit[v] += xf[n * H + j] * wte[v * H + j];
      mx = std::max(mx, logit[v]);
    }
    for (int v = 0; v < vocab; ++v) z += std::exp(logit[v] - mx);
    loss += std::log(z) + mx - logit[targets[n]];
  }
  return loss / N;
}

}  // namespace foresight::trainer::test
