// CPU twins of the dense kernels: GEMM, elementwise, layernorm, cross-entropy, embedding, AdamW.
// Straight loops with double accumulators: slow and obviously right.
#include "kernels/reference.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace foresight::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

float gelu(float xf) {
  const double x = xf;
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x))));
}

float gelu_grad(float xf) {
  // d/dx [0.5 x (1 + tanh u)], u = c (x + a x^3): 0.5 (1 + tanh u) + 0.5 x sech^2(u) c (1 + 3 a x^2).
  const double x = xf;
  const double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const double t = std::tanh(u);
  return static_cast<float>(0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x));
}

namespace ref {

void gemm(const float* A, const float* B, float* C, const GemmDims& d, const float* bias, Epilogue epilogue,
          float alpha, float beta, float* aux) {
  if (d.m <= 0 || d.n <= 0 || d.k <= 0 || d.batch <= 0) throw std::invalid_argument("gemm: sizes must be positive");
  if (beta != 0.0f && epilogue != Epilogue::none)
    throw std::invalid_argument("gemm: beta != 0 is only allowed without an epilogue");
  const bool with_aux = epilogue == Epilogue::bias_gelu_aux || epilogue == Epilogue::dgelu;
  const bool with_bias = epilogue == Epilogue::bias || epilogue == Epilogue::bias_gelu ||
                         epilogue == Epilogue::bias_gelu_aux;
  const bool with_gelu = epilogue == Epilogue::gelu || epilogue == Epilogue::bias_gelu ||
                         epilogue == Epilogue::bias_gelu_aux;
  if (with_aux && (!aux || d.batch != 1)) throw std::invalid_argument("gemm: the epilogue needs an aux matrix, batch 1");
  if (with_bias && !bias) throw std::invalid_argument("gemm: the epilogue needs a bias");
  const long la = d.ld_a(), lb = d.ld_b(), lc = d.ld_c();
  if (!d.leading_dims_cover_widths()) throw std::invalid_argument("gemm: a leading dimension below the stored width");
  const long sa = d.batch_stride_a(), sb = d.batch_stride_b(), sc = d.batch_stride_c();
  for (int b = 0; b < d.batch; ++b) {
    const float* a = A + b * sa;
    const float* bb = B + b * sb;
    float* c = C + b * sc;
    for (int i = 0; i < d.m; ++i)
      for (int j = 0; j < d.n; ++j) {
        double acc = 0;
        for (int p = 0; p < d.k; ++p) {
          const double av = d.trans_a ? a[long(p) * la + i] : a[long(i) * la + p];
          const double bv = d.trans_b ? bb[long(j) * lb + p] : bb[long(p) * lb + j];
          acc += av * bv;
        }
        double r = alpha * acc;
        if (with_bias) r += bias[j];
        float out = static_cast<float>(r);
        if (epilogue == Epilogue::bias_gelu_aux) aux[long(i) * lc + j] = out;
        if (with_gelu) out = gelu(out);
        if (epilogue == Epilogue::dgelu) out = static_cast<float>(double(out) * gelu_grad(aux[long(i) * lc + j]));
        if (beta != 0.0f) out = static_cast<float>(r + double(beta) * c[long(i) * lc + j]);
        c[long(i) * lc + j] = out;
      }
  }
}

void bias_grad(const float* dy, float* db, int m, int n) {
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int i = 0; i < m; ++i) s += dy[long(i) * n + j];
    db[j] = static_cast<float>(db[j] + s);
  }
}

void gelu_forward(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

void gelu_backward(const float* x, const float* dy, float* dx, long n) {
  for (long i = 0; i < n; ++i) dx[i] = static_cast<float>(double(dy[i]) * gelu_grad(x[i]));
}

void residual_add(const float* a, const float* b, float* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = static_cast<float>(double(a[i]) + double(b[i]));
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int N, int C, float eps) {
  for (int r = 0; r < N; ++r) {
    const float* xr = x + long(r) * C;
    double mu = 0;
    for (int c = 0; c < C; ++c) mu += xr[c];
    mu /= C;
    double var = 0;
    for (int c = 0; c < C; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= C;  // biased, as PyTorch's LayerNorm
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c) y[long(r) * C + c] = static_cast<float>((xr[c] - mu) * rs * gamma[c] + beta[c]);
    if (mean) mean[r] = static_cast<float>(mu);
    if (rstd) rstd[r] = static_cast<float>(rs);
  }
}

void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* dgamma, float* dbeta, int N, int C) {
  std::vector<double> dg(C, 0.0), dbt(C, 0.0);
  for (int r = 0; r < N; ++r) {
    const float* xr = x + long(r) * C;
    const float* dyr = dy + long(r) * C;
    // xhat = (x - mu) rstd; dxhat = dy gamma; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
    double m1 = 0, m2 = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (xr[c] - double(mean[r])) * rstd[r];
      const double dxhat = double(dyr[c]) * gamma[c];
      m1 += dxhat;
      m2 += dxhat * xhat;
      dg[c] += double(dyr[c]) * xhat;
      dbt[c] += dyr[c];
    }
    m1 /= C;
    m2 /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (xr[c] - double(mean[r])) * rstd[r];
      const double dxhat = double(dyr[c]) * gamma[c];
      dx[long(r) * C + c] = static_cast<float>(rstd[r] * (dxhat - m1 - xhat * m2));
    }
  }
  for (int c = 0; c < C; ++c) {
    dgamma[c] = static_cast<float>(dgamma[c] + dg[c]);
    dbeta[c] = static_cast<float>(dbeta[c] + dbt[c]);
  }
}

void softmax_cross_entropy(const float* logits, const std::int32_t* targets, float* losses, float* dlogits, int N,
                           int V, float dloss) {
  for (int r = 0; r < N; ++r) {
    const float* l = logits + long(r) * V;
    const int t = targets[r];
    if (t >= V) throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(t) + " >= V");
    if (t < 0) {  // ignored position (padding)
      losses[r] = 0;
      if (dlogits)
        for (int v = 0; v < V; ++v) dlogits[long(r) * V + v] = 0;
      continue;
    }
    double mx = l[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, double(l[v]));
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(l[v] - mx);
    losses[r] = static_cast<float>(std::log(s) + mx - l[t]);
    if (dlogits)
      for (int v = 0; v < V; ++v)
        dlogits[long(r) * V + v] = static_cast<float>((std::exp(l[v] - mx) / s - (v == t ? 1.0 : 0.0)) * dloss);
  }
}

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int B, int T, int C,
                       int V) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int tok = tokens[b * T + t];
      if (tok < 0 || tok >= V) throw std::out_of_range("embedding_forward: token " + std::to_string(tok));
      for (int c = 0; c < C; ++c)
        out[(long(b) * T + t) * C + c] =
            static_cast<float>(double(wte[long(tok) * C + c]) + (wpe ? double(wpe[long(t) * C + c]) : 0.0));
    }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B, int T, int C,
                        int V) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int tok = tokens[b * T + t];
      if (tok < 0 || tok >= V) throw std::out_of_range("embedding_backward: token " + std::to_string(tok));
      for (int c = 0; c < C; ++c) {
        const float g = dout[(long(b) * T + t) * C + c];
        dwte[long(tok) * C + c] += g;
        if (dwpe) dwpe[long(t) * C + c] += g;
      }
    }
}

void adamw(float* params, const float* grads, float* m, float* v, bf16* params_bf16, long n, const AdamWConfig& c,
           int step) {
  if (step < 1) throw std::invalid_argument("adamw: step is 1-based");
  const double bc1 = 1.0 - std::pow(double(c.beta1), step);
  const double bc2 = 1.0 - std::pow(double(c.beta2), step);
  for (long i = 0; i < n; ++i) {
    const double g = double(grads[i]) * c.grad_scale;
    const double mi = c.beta1 * double(m[i]) + (1.0 - c.beta1) * g;
    const double vi = c.beta2 * double(v[i]) + (1.0 - c.beta2) * g * g;
    double p = params[i];
    p -= double(c.lr) * c.weight_decay * p;  // decoupled weight decay, on the old weight
    p -= double(c.lr) * (mi / bc1) / (std::sqrt(vi / bc2) + c.eps);
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    params[i] = static_cast<float>(p);
    if (params_bf16) params_bf16[i] = to_bf16(params[i]);
  }
}

}  // namespace ref
}  // namespace foresight::kernels
