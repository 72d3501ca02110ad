// CPU twins of causal attention (the textbook softmax(QK^T)V over the full score row, no tiling)
// and of the MoE router and token permutations.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/reference.hpp"

namespace foresight::kernels::ref {

namespace {
// Element (b, t, h, d) of a (B, T, H, D) tensor.
inline long at(int b, int t, int h, int d, int T, int H, int D) { return ((long(b) * T + t) * H + h) * D + d; }
}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* o, float* lse, int B, int T, int H,
                       int D, float scale) {
  std::vector<double> s(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= i; ++j) {  // causal: query i sees keys 0..i
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(q[at(b, i, h, d, T, H, D)]) * k[at(b, j, h, d, T, H, D)];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += std::exp(s[j] - mx) * v[at(b, j, h, d, T, H, D)];
          o[at(b, i, h, d, T, H, D)] = static_cast<float>(acc / sum);
        }
        if (lse) lse[(long(b) * H + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
}

void attention_backward(const float* q, const float* k, const float* v, const float* o, const float* dout,
                        const float* lse, float* dq, float* dk, float* dv, int B, int T, int H, int D, float scale) {
  // P = exp(scale q k^T - lse); dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO o)); dQ = scale dS K;
  // dK = scale dS^T Q (Dao 2023, FlashAttention-2, Algorithm 2).
  const long n = long(B) * T * H * D;
  std::vector<double> gq(n, 0.0), gk(n, 0.0), gv(n, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const double l = lse[(long(b) * H + h) * T + i];
        double di = 0;
        for (int d = 0; d < D; ++d) di += double(dout[at(b, i, h, d, T, H, D)]) * o[at(b, i, h, d, T, H, D)];
        for (int j = 0; j <= i; ++j) {
          double s = 0, dp = 0;
          for (int d = 0; d < D; ++d) {
            s += double(q[at(b, i, h, d, T, H, D)]) * k[at(b, j, h, d, T, H, D)];
            dp += double(dout[at(b, i, h, d, T, H, D)]) * v[at(b, j, h, d, T, H, D)];
          }
          const double p = std::exp(s * scale - l);
          const double ds = p * (dp - di);
          for (int d = 0; d < D; ++d) {
            gv[at(b, j, h, d, T, H, D)] += p * dout[at(b, i, h, d, T, H, D)];
            gq[at(b, i, h, d, T, H, D)] += scale * ds * k[at(b, j, h, d, T, H, D)];
            gk[at(b, j, h, d, T, H, D)] += scale * ds * q[at(b, i, h, d, T, H, D)];
          }
        }
      }
  for (long i = 0; i < n; ++i) {
    dq[i] = static_cast<float>(gq[i]);
    dk[i] = static_cast<float>(gk[i]);
    dv[i] = static_cast<float>(gv[i]);
  }
}

namespace {
std::vector<double> softmax_row(const float* l, int E) {
  std::vector<double> p(E);
  double mx = l[0];
  for (int e = 1; e < E; ++e) mx = std::max(mx, double(l[e]));
  double s = 0;
  for (int e = 0; e < E; ++e) s += (p[e] = std::exp(l[e] - mx));
  for (auto& x : p) x /= s;
  return p;
}
}  // namespace

void moe_router_forward(const float* logits, int N, int E, int k, int capacity, bool normalize, std::int32_t* expert,
                        float* gate, std::int32_t* slot, std::int32_t* counts) {
  if (k < 1 || k > E) throw std::invalid_argument("moe_router_forward: need 1 <= k <= E");
  for (int n = 0; n < N; ++n) {
    const auto p = softmax_row(logits + long(n) * E, E);
    std::vector<bool> taken(E, false);
    double sum = 0;
    for (int c = 0; c < k; ++c) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;  // strict >: ties go to the lower id
      taken[best] = true;
      expert[n * k + c] = best;
      gate[n * k + c] = static_cast<float>(p[best]);
      sum += p[best];
    }
    if (normalize)
      for (int c = 0; c < k; ++c) gate[n * k + c] = static_cast<float>(p[expert[n * k + c]] / sum);
  }
  std::vector<int> used(E, 0);
  for (int c = 0; c < k; ++c)  // choice-major priority
    for (int n = 0; n < N; ++n) {
      const int e = expert[n * k + c];
      slot[n * k + c] = used[e] < capacity ? used[e]++ : -1;
    }
  for (int e = 0; e < E; ++e) counts[e] = used[e];
}

void moe_router_backward(const float* logits, const std::int32_t* expert, const float* dgate, int N, int E, int k,
                         bool normalize, float* dlogits) {
  for (int n = 0; n < N; ++n) {
    const auto p = softmax_row(logits + long(n) * E, E);
    std::vector<double> dp(E, 0.0);
    if (normalize) {
      // g_i = p_i / S over the picked set K, S = sum_K p: dL/dp_j = (dg_j - sum_K dg_i g_i) / S.
      double S = 0, dot = 0;
      for (int c = 0; c < k; ++c) S += p[expert[n * k + c]];
      for (int c = 0; c < k; ++c) dot += double(dgate[n * k + c]) * p[expert[n * k + c]] / S;
      for (int c = 0; c < k; ++c) dp[expert[n * k + c]] = (dgate[n * k + c] - dot) / S;
    } else {
      for (int c = 0; c < k; ++c) dp[expert[n * k + c]] = dgate[n * k + c];
    }
    double pdp = 0;  // softmax backward: dl_e = p_e (dp_e - sum p dp)
    for (int e = 0; e < E; ++e) pdp += p[e] * dp[e];
    for (int e = 0; e < E; ++e) dlogits[long(n) * E + e] = static_cast<float>(p[e] * (dp[e] - pdp));
  }
}

void moe_permute(const float* x, const std::int32_t* expert, const std::int32_t* slot, float* out, int N, int k, int C,
                 int E, int capacity) {
  std::fill(out, out + long(E) * capacity * C, 0.0f);
  for (int a = 0; a < N * k; ++a)
    if (slot[a] >= 0)
      std::copy(x + long(a / k) * C, x + long(a / k + 1) * C, out + (long(expert[a]) * capacity + slot[a]) * C);
}

void moe_permute_backward(const float* dout, const std::int32_t* expert, const std::int32_t* slot, float* dx, int N,
                          int k, int C, int capacity) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const int a = n * k + j;
        if (slot[a] >= 0) s += dout[(long(expert[a]) * capacity + slot[a]) * C + c];
      }
      dx[long(n) * C + c] = static_cast<float>(s);
    }
}

void moe_unpermute(const float* expert_out, const std::int32_t* expert, const std::int32_t* slot, const float* gate,
                   float* y, int N, int k, int C, int capacity) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const int a = n * k + j;
        if (slot[a] >= 0) s += double(gate[a]) * expert_out[(long(expert[a]) * capacity + slot[a]) * C + c];
      }
      y[long(n) * C + c] = static_cast<float>(s);
    }
}

void moe_unpermute_backward(const float* dy, const float* expert_out, const std::int32_t* expert,
                            const std::int32_t* slot, const float* gate, float* d_expert_out, float* dgate, int N,
                            int k, int C, int E, int capacity) {
  std::fill(d_expert_out, d_expert_out + long(E) * capacity * C, 0.0f);
  for (int a = 0; a < N * k; ++a) {
    const int n = a / k;
    if (slot[a] < 0) {
      dgate[a] = 0;
      continue;
    }
    const long row = (long(expert[a]) * capacity + slot[a]) * C;
    double dot = 0;
    for (int c = 0; c < C; ++c) {
      d_expert_out[row + c] = gate[a] * dy[long(n) * C + c];
      dot += double(dy[long(n) * C + c]) * expert_out[row + c];
    }
    dgate[a] = static_cast<float>(dot);
  }
}

}  // namespace foresight::kernels::ref
