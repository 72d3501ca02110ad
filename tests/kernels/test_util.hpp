// Helpers of the kernel reference tests: seeded random tensors, central finite differences of a
// scalar loss, and the error measures every tolerance test prints.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace foresight::kernels::test {

inline std::vector<float> random_vector(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// d loss / d x[i] by central differences, x perturbed in place and restored.
inline std::vector<double> finite_difference(std::vector<float>& x, const std::function<double()>& loss,
                                             float h = 1e-2f) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2.0 * double(h));
  }
  return g;
}

/// max_i |a_i - b_i| / max(max_i |b_i|, floor): a normwise relative error, robust to zeros in b.
template <class A, class B>
double max_rel_error(const A& a, const B& b, double floor = 1e-12) {
  double err = 0, scale = floor;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

/// sum_i w_i y_i in double: the scalar loss whose gradient a backward pass with dy = w returns.
inline double weighted_sum(const std::vector<float>& y, const std::vector<float>& w) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * w[i];
  return s;
}

}  // namespace foresight::kernels::test
