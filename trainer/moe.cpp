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

/// For each (token, choice) pair, in (n, j) order, the row of its kept slot in the (E * capacity, h)
/// expert-major layout, or -1 when the choice was dropped.
std::vector<std::int32_t> slot_rows(const MoeDims& d, const MoeActivations& a) {
  const std::size_t pairs = std::size_t(d.tokens) * std::size_t(d.top_k);
  std::vector<std::int32_t> r(pairs, -1);
  for (std::size_t i = 0; i < pairs; ++i)
    if (a.slot[i] >= 0) r[i] = std::int32_t(std::int64_t(a.expert[i]) * d.capacity() + a.slot[i]);
  return r;
}

/// Who fills each of the E * capacity slots: the token (-1: empty) and its gate, from slot_rows.
struct SlotSources {
  std::vector<std::int32_t> token;
  std::vector<double> gate;
};
SlotSources slot_sources(const MoeDims& d, const MoeActivations& a, const std::vector<std::int32_t>& rows) {
  const std::size_t slots = std::size_t(d.experts) * std::size_t(d.capacity());
  SlotSources s{std::vector<std::int32_t>(slots, -1), std::vector<double>(slots, 0.0)};
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] >= 0) {
      s.token[std::size_t(rows[i])] = std::int32_t(i / std::size_t(d.top_k));
      s.gate[std::size_t(rows[i])] = a.gate[i];
    }
  return s;
}

/// Runs every local expert's MLP on its rows of `in` (ep sources x local experts x capacity, h).
void experts_forward(Backend& be, const MoeDims& d, const MoeTensors& w, MoeActivations& a) {
  const int cap = d.capacity(), L = d.local_experts();
  for (int s = 0; s < d.ep; ++s)
    for (int j = 0; j < L; ++j) {
      const std::int64_t first = (std::int64_t(s) * L + j) * cap;
      be.matmul_bias_gelu(a.gelu.row_slice(first, cap), a.fc1.row_slice(first, cap),
                          a.expert_in.row_slice(first, cap), false, w.w_fc1[std::size_t(j)], false,
                          w.b_fc1[std::size_t(j)]);
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
  const std::vector<std::int32_t> rows = slot_rows(d, a);
  Tensor dispatch = be.zeros(std::int64_t(E) * cap, H);
  be.embedding_forward(dispatch, input, slot_sources(d, a, rows).token, 0);
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
  // Combine: the outputs go back to the tokens' ranks; each token's row is its kept slots' rows
  // weighted by the gates, gathered on the backend (y_n = sum_j gate_nj * out[slot_nj]).
  a.combined_out = be.zeros(std::int64_t(E) * cap, H);
  ep.all_to_all(a.combined_out, out);
  Tensor y = be.zeros(N, H);
  be.gather_rows_weighted(y, a.combined_out, rows, a.gate, K);
  return y;
}

Tensor moe_backward(Backend& be, Communicator& ep, const MoeDims& d, const MoeTensors& w, const MoeTensors& g,
                    const MoeActivations& a, const Tensor& dy, double aux_scale) {
  const std::int64_t N = d.tokens;
  const int E = d.experts, K = d.top_k, cap = d.capacity(), L = d.local_experts(), H = d.hidden;
  // Combine backward: d(expert output) = gate * dy at each kept slot (every slot has at most one
  // token: a gather with k = 1 from dy); dgate = dy . expert output (row dots, to the host for the
  // router's backward). Dropped choices get no gradient.
  const std::vector<std::int32_t> rows = slot_rows(d, a);
  std::vector<std::int32_t> token_rows(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) token_rows[i] = std::int32_t(i / std::size_t(K));
  const std::vector<double> dgate = be.row_dots(dy, token_rows, a.combined_out, rows);
  const SlotSources from = slot_sources(d, a, rows);
  Tensor dcombined = be.zeros(std::int64_t(E) * cap, H);
  be.gather_rows_weighted(dcombined, dy, from.token, from.gate, 1);
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
      Tensor dfc1 = be.zeros(cap, d.ffn);
      be.matmul_dgelu(dfc1, dob, false, w.w_fc2[e], true, a.fc1.row_slice(first, cap));
      be.bias_backward(g.b_fc1[e], dfc1);
      be.matmul(g.w_fc1[e], a.expert_in.row_slice(first, cap), true, dfc1, false, true);
      be.matmul(din.row_slice(first, cap), dfc1, false, w.w_fc1[e], true, false);
    }
  Tensor ddispatch = be.zeros(std::int64_t(E) * cap, H);
  ep.all_to_all(ddispatch, din);  // back to the tokens' ranks
  // dL/dinput through the dispatch: each token's kept slots' rows summed (weights 1); the router's
  // part is added below.
  Tensor dinput = be.zeros(N, H);
  be.gather_rows_weighted(dinput, ddispatch, rows, std::vector<double>(rows.size(), 1.0), K);

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
  be.matmul(dinput, dl, false, w.router, true, true);
  return dinput;
}

}  // namespace foresight::trainer
