// Fused AdamW over fp32 master weights: one pass reads grad, weight, m, v and writes weight, m, v
// and the bf16 working copy (30 bytes per parameter, cost_models/roofline.hpp optimizer_time).
// Bias corrections are computed on the host in double, once per step.
#include <cmath>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float inv_bc1, inv_sqrt_bc2;  // 1 / (1 - beta1^t), 1 / sqrt(1 - beta2^t)
};

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* pb, long n, AdamWStep s) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i] * s.grad_scale;
  const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
  const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
  float w = p[i];
  w -= s.lr * s.weight_decay * w;
  // mhat / (sqrt(vhat) + eps) with mhat = m / bc1, sqrt(vhat) = sqrt(v) / sqrt(bc2).
  w -= s.lr * (mi * s.inv_bc1) / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
  m[i] = mi;
  v[i] = vi;
  p[i] = w;
  if (pb) pb[i] = dev::to_b(w);
}

}  // namespace

void adamw(float* params, const float* grads, float* m, float* v, bf16* params_bf16, long n, const AdamWConfig& c,
           int step, cudaStream_t stream) {
  detail::require(step >= 1, "adamw: step is 1-based");
  detail::require(n >= 0, "adamw: n must be non-negative");
  if (n == 0) return;
  const AdamWStep s{c.lr,
                    c.beta1,
                    c.beta2,
                    c.eps,
                    c.weight_decay,
                    c.grad_scale,
                    static_cast<float>(1.0 / (1.0 - std::pow(double(c.beta1), step))),
                    static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double(c.beta2), step)))};
  adamw_kernel<<<dev::blocks_for(n, 256), 256, 0, stream>>>(params, grads, m, v,
                                                            params_bf16 ? dev::cu(params_bf16) : nullptr, n, s);
  FORESIGHT_CUDA_LAUNCHED("adamw");
}

}  // namespace foresight::kernels
