#include "trainer/moe.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace foresight::trainer {

int MoeDims::capacity() const {
  return int(std::ceil(capacity_factor * double(tokens) * top_k / experts - 1e-9));
}

namespace {

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> v(std::size_t(t.numel()));
  be.copy_to_host(v, t);
  return v;
}

/// Runs every local expert's MLP on its rows of `in` (ep sources x local experts x capacity, h).
void experts_forward(Backend& be, const MoeDims& d, const MoeTensors& w, MoeActivations& a) {
  const int cap = d.capacity(), L = d.local_experts();
  for (int s = 0; s < d.ep; ++s)
    for (int j = 0; j < L; ++j) {
      const std::int64_t first = (std::int64_t(s) * L + j) * cap;
      Tensor f = a.fc1.row_slice(first, cap), g = a.gelu.row_slice(first, cap);
      be.matmul_bias(f, a.expert_in.row_slice(first, cap), false, w.w_fc1[std::size_t(j)], false,
                     w.b_fc1[std::size_t(j)]);
      be.gelu_forward(g, f);
    }
}

}  // namespace

Tensor moe_forward(Backend& be, Communicator& ep, const MoeDims& d, const MoeTensors& w, const Tensor& input,
                   MoeActivations& a) {
  const std::int64_t N = d.tokens;
  const int E = d.experts, K = d.top_k, cap = d.capacity(), L = d.local_experts(), H = d.hidden;
  FORESIGHT_CHECK(E % d.ep == 0 && K <= E && ep.size() == d.ep) << "experts " << E << ", top_k " << K << ", ep " << d.ep;
  a.input = input;
  // Router: softmax of input @ router, top-k, capacity slots.
  Tensor logits = be.zeros(N, E);
  be.matmul(logits, input, false, w.router, false, false);
  const std::vector<float> lg = to_host(be, logits);
  a.probs.assign(std::size_t(N * E), 0.0);
  a.expert.assign(std::size_t(N * K), -1);
  a.slot.assign(std::size_t(N * K), -1);
  a.gate.assign(std::size_t(N * K), 0.0);
  a.load.assign(std::size_t(E), 0.0);
  for (std::int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, double(lg[n * E + e]));
    for (int e = 0; e < E; ++e) sum += (a.probs[n * E + e] = std::exp(double(lg[n * E + e]) - mx));
    for (int e = 0; e < E; ++e) a.probs[n * E + e] /= sum;
    std::vector<int> order(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) order[std::size_t(e)] = e;
    // Most probable first; ties to the lower expert id.
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return a.probs[n * E + x] > a.probs[n * E + y]; });
    double picked = 0;
    for (int j = 0; j < K; ++j) picked += a.probs[n * E + order[std::size_t(j)]];
    for (int j = 0; j < K; ++j) {
      const int e = order[std::size_t(j)];
      a.expert[n * K + j] = e;
      a.gate[n * K + j] = K > 1 ? a.probs[n * E + e] / picked : a.probs[n * E + e];
      a.load[std::size_t(e)] += 1.0 / double(N * K);
    }
  }
  std::vector<int> used(std::size_t(E), 0);
  for (int j = 0; j < K; ++j)  // every token's first choice before any second choice (GShard)
    for (std::int64_t n = 0; n < N; ++n) {
      const int e = a.expert[n * K + j];
      if (used[std::size_t(e)] < cap) a.slot[n * K + j] = used[std::size_t(e)]++;
    }
  // L_aux = coefficient * E * sum_e f_e * P_e, P_e the mean router probability of expert e.
  a.aux_loss = 0;
  for (int e = 0; e < E; ++e) {
    double p = 0;
    for (std::int64_t n = 0; n < N; ++n) p += a.probs[n * E + e];
    a.aux_loss += kMoeAuxCoefficient * E * a.load[std::size_t(e)] * p / double(N);
  }

  // Dispatch: (E, capacity, h) expert-major, so rank r's experts are one contiguous block. One row
  // gather (the embedding lookup's op, `input` as the table: row i of the dispatch is the token
  // that took slot i, or zeros for an empty slot) rather than a copy per routed token, which on a
  // GPU was N x K launches per MoE layer.
  std::vector<std::int32_t> token_of_slot(std::size_t(E) * cap, -1);
  for (std::int64_t n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j)
      if (a.slot[n * K + j] >= 0)
        token_of_slot[std::size_t(a.expert[n * K + j]) * cap + std::size_t(a.slot[n * K + j])] = std::int32_t(n);
  Tensor dispatch = be.zeros(std::int64_t(E) * cap, H);
  be.embedding_forward(dispatch, input, token_of_slot, 0);
  a.expert_in = be.zeros(std::int64_t(d.ep) * L * cap, H);  // by source rank, then local expert
  ep.all_to_all(a.expert_in, dispatch);
  a.fc1 = be.zeros(a.expert_in.rows(), d.ffn);
  a.gelu = be.zeros(a.expert_in.rows(), d.ffn);
  experts_forward(be, d, w, a);
  Tensor out = be.zeros(a.expert_in.rows(), H);
  for (int s = 0; s < d.ep; ++s)
    for (int j = 0; j < L; ++j) {
      const std::int64_t first = (std::int64_t(s) * L + j) * cap;
      Tensor o = out.row_slice(first, cap);
      // An expert's whole output (experts are not split over tensor-parallel ranks): bias fused.
      be.matmul_bias(o, a.gelu.row_slice(first, cap), false, w.w_fc2[std::size_t(j)], false, w.b_fc2[std::size_t(j)]);
    }
  // Combine: the outputs go back to the tokens' ranks, weighted by the gates.
  a.combined_out = be.zeros(std::int64_t(E) * cap, H);
  ep.all_to_all(a.combined_out, out);
  const std::vector<float> co = to_host(be, a.combined_out);
  std::vector<float> y(std::size_t(N * H), 0.0f);
  for (std::int64_t n = 0; n < N; ++n)
    for (int c = 0; c < H; ++c) {
      double acc = 0;
      for (int j = 0; j < K; ++j)
        if (a.slot[n * K + j] >= 0)
          acc += a.gate[n * K + j] * co[(std::size_t(a.expert[n * K + j]) * cap + a.slot[n * K + j]) * H + c];
      y[std::size_t(n * H + c)] = float(acc);
    }
  Tensor yt = be.zeros(N, H);
  be.copy_from_host(yt, y);
  return yt;
}

Tensor moe_backward(Backend& be, Communicator& ep, const MoeDims& d, const MoeTensors& w, const MoeTensors& g,
                    const MoeActivations& a, const Tensor& dy, double aux_scale) {
  const std::int64_t N = d.tokens;
  const int E = d.experts, K = d.top_k, cap = d.capacity(), L = d.local_experts(), H = d.hidden;
  const std::vector<float> dyh = to_host(be, dy), co = to_host(be, a.combined_out);
  // Combine backward: d(expert output) = gate * dy at kept slots; dgate = dy . expert output.
  std::vector<float> dco(std::size_t(E) * cap * H, 0.0f);
  std::vector<double> dgate(std::size_t(N * K), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      if (a.slot[n * K + j] < 0) continue;
      const std::size_t row = (std::size_t(a.expert[n * K + j]) * cap + a.slot[n * K + j]) * H;
      double dot = 0;
      for (int c = 0; c < H; ++c) {
        dco[row + c] = float(a.gate[n * K + j] * dyh[std::size_t(n * H + c)]);
        dot += double(dyh[std::size_t(n * H + c)]) * co[row + c];
      }
      dgate[std::size_t(n * K + j)] = dot;
    }
  Tensor dcombined = be.zeros(std::int64_t(E) * cap, H);
  be.copy_from_host(dcombined, dco);
  Tensor dout = be.zeros(a.expert_in.rows(), H);
  ep.all_to_all(dout, dcombined);  // to the experts' ranks, as the dispatch went

  // Experts backward, block by block (source rank, local expert).
  Tensor din = be.zeros(a.expert_in.rows(), H);
  for (int s = 0; s < d.ep; ++s)
    for (int j = 0; j < L; ++j) {
      const std::int64_t first = (std::int64_t(s) * L + j) * cap;
      const std::size_t e = std::size_t(j);
      const Tensor dob = dout.row_slice(first, cap);
      be.bias_backward(g.b_fc2[e], dob);
      be.matmul(g.w_fc2[e], a.gelu.row_slice(first, cap), true, dob, false, true);
      Tensor dgelu = be.zeros(cap, d.ffn);
      be.matmul(dgelu, dob, false, w.w_fc2[e], true, false);
      Tensor dfc1 = be.zeros(cap, d.ffn);
      be.gelu_backward(dfc1, dgelu, a.fc1.row_slice(first, cap));
      be.bias_backward(g.b_fc1[e], dfc1);
      be.matmul(g.w_fc1[e], a.expert_in.row_slice(first, cap), true, dfc1, false, true);
      be.matmul(din.row_slice(first, cap), dfc1, false, w.w_fc1[e], true, false);
    }
  Tensor ddispatch = be.zeros(std::int64_t(E) * cap, H);
  ep.all_to_all(ddispatch, din);  // back to the tokens' ranks
  const std::vector<float> dd = to_host(be, ddispatch);
  std::vector<float> dx(std::size_t(N * H), 0.0f);
  for (std::int64_t n = 0; n < N; ++n)
    for (int c = 0; c < H; ++c) {
      double acc = 0;
      for (int j = 0; j < K; ++j)
        if (a.slot[n * K + j] >= 0) acc += dd[(std::size_t(a.expert[n * K + j]) * cap + a.slot[n * K + j]) * H + c];
      dx[std::size_t(n * H + c)] = float(acc);
    }

  // Router backward: through the gate renormalisation, the load-balancing loss and the softmax.
  std::vector<float> dlogits(std::size_t(N * E), 0.0f);
  for (std::int64_t n = 0; n < N; ++n) {
    std::vector<double> dp(std::size_t(E), 0.0);
    if (K > 1) {
      // g_i = p_i / S over the picks: dp_i = (dg_i - sum_j dg_j g_j) / S.
      double S = 0, dgg = 0;
      for (int j = 0; j < K; ++j) {
        S += a.probs[n * E + a.expert[n * K + j]];
        dgg += dgate[std::size_t(n * K + j)] * a.gate[n * K + j];
      }
      for (int j = 0; j < K; ++j) dp[std::size_t(a.expert[n * K + j])] += (dgate[std::size_t(n * K + j)] - dgg) / S;
    } else {
      dp[std::size_t(a.expert[n])] += dgate[std::size_t(n)];
    }
    // d(L_aux)/dp_{n,e} = coefficient * E * f_e / N (f_e, the hard choice counts, has no gradient).
    for (int e = 0; e < E; ++e) dp[std::size_t(e)] += aux_scale * kMoeAuxCoefficient * E * a.load[std::size_t(e)] / double(N);
    double pdp = 0;
    for (int e = 0; e < E; ++e) pdp += a.probs[n * E + e] * dp[std::size_t(e)];
    for (int e = 0; e < E; ++e) dlogits[std::size_t(n * E + e)] = float(a.probs[n * E + e] * (dp[std::size_t(e)] - pdp));
  }
  Tensor dl = be.zeros(N, E);
  be.copy_from_host(dl, dlogits);
  be.matmul(g.router, a.input, true, dl, false, true);
  Tensor dinput = be.zeros(N, H);
  be.copy_from_host(dinput, dx);
  be.matmul(dinput, dl, false, w.router, true, true);
  return dinput;
}

}  // namespace foresight::trainer
