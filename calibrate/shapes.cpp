// The shapes calibration measures: what the planner will ask about, plus a generic grid.
#include <algorithm>
#include <set>
#include <tuple>

#include "calibrate/calibrate.hpp"

namespace foresight::calibrate {

std::vector<cost_models::GemmShape> planner_gemm_shapes(const ModelSpec& m) {
  std::set<std::tuple<double, double, double>> seen;
  std::vector<cost_models::GemmShape> out;
  auto add = [&](double mm, double nn, double kk) {
    if (mm < 1 || nn < 1 || kk < 1) return;
    if (seen.insert({mm, nn, kk}).second) out.push_back({mm, nn, kk, 1});
  };
  // Forward (m, n, k) and the backward data and weight gradients (m, k, n) and (k, n, m), as
  // layer_times' fwd_bwd lambda prices them.
  auto fwd_bwd = [&](double mm, double nn, double kk) {
    add(mm, nn, kk);
    add(mm, kk, nn);
    add(kk, nn, mm);
  };
  const double h = m.hidden, f = m.ffn_hidden > 0 ? m.ffn_hidden : 4.0 * m.hidden;
  const double kv = (m.kv_heads > 0 ? m.kv_heads : m.heads) * double(m.head_dim());
  for (int tp : {1, 2, 4, 8}) {
    if (m.heads % tp != 0) continue;
    for (int mb : {1, 2}) {
      const double T = double(mb) * m.seq_len;
      fwd_bwd(T, (h + 2 * kv) / tp, h);  // QKV
      fwd_bwd(T, h, h / tp);             // attention projection
      fwd_bwd(T, f / tp, h);             // FC1
      fwd_bwd(T, h, f / tp);             // FC2
      if (mb == 1) fwd_bwd(T, double(m.vocab) / tp, h);  // LM head (vocab-parallel)
    }
  }
  return out;
}

std::vector<cost_models::GemmShape> generic_gemm_grid(bool quick) {
  const std::vector<double> full = {256, 1024, 2048, 4096, 8192, 16384}, small = {1024, 4096, 8192};
  const auto& v = quick ? small : full;
  std::vector<cost_models::GemmShape> out;
  for (double mm : v)
    for (double nn : v)
      for (double kk : v)
        if (mm * nn * kk <= 8192.0 * 8192 * 16384) out.push_back({mm, nn, kk, 1});  // cap the largest at ~2.2 TFLOP
  return out;
}

}  // namespace foresight::calibrate
