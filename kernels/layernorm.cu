// LayerNorm forward and backward over rows of C bf16 values: one warp per row, fp32 statistics
// (two passes over the row: mean, then the centred variance, which stays accurate when the mean is
// large). dgamma/dbeta: one thread per column over chunks of rows, chunks meeting in fp32 atomics.
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void layernorm_fwd_kernel(const __nv_bfloat16* x, const __nv_bfloat16* gamma, const __nv_bfloat16* beta,
                                     __nv_bfloat16* y, float* mean, float* rstd, int N, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // whole warps leave together: no block-level synchronisation below
  const __nv_bfloat16* xr = x + long(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += dev::to_f(xr[c]);
  const float mu = dev::warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) {
    const float d = dev::to_f(xr[c]) - mu;
    v += d * d;
  }
  const float rs = rsqrtf(dev::warp_sum(v) / C + eps);
  __nv_bfloat16* yr = y + long(row) * C;
  for (int c = lane; c < C; c += 32)
    yr[c] = dev::to_b((dev::to_f(xr[c]) - mu) * rs * dev::to_f(gamma[c]) + dev::to_f(beta[c]));
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

__global__ void layernorm_bwd_dx_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* gamma,
                                        const float* mean, const float* rstd, __nv_bfloat16* dx, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const long off = long(row) * C;
  const float mu = mean[row], rs = rstd[row];
  // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma.
  float m1 = 0, m2 = 0;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (dev::to_f(x[off + c]) - mu) * rs;
    const float dxhat = dev::to_f(dy[off + c]) * dev::to_f(gamma[c]);
    m1 += dxhat;
    m2 += dxhat * xhat;
  }
  m1 = dev::warp_sum(m1) / C;
  m2 = dev::warp_sum(m2) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (dev::to_f(x[off + c]) - mu) * rs;
    const float dxhat = dev::to_f(dy[off + c]) * dev::to_f(gamma[c]);
    dx[off + c] = dev::to_b(rs * (dxhat - m1 - xhat * m2));
  }
}

constexpr int kParamRows = 128;
__global__ void layernorm_bwd_params_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* x, const float* mean,
                                            const float* rstd, float* dgamma, float* dbeta, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kParamRows, r1 = min(N, r0 + kParamRows);
  float g = 0, b = 0;
  for (int r = r0; r < r1; ++r) {
    const float d = dev::to_f(dy[long(r) * C + c]);
    g += d * (dev::to_f(x[long(r) * C + c]) - mean[r]) * rstd[r];
    b += d;
  }
  atomicAdd(dgamma + c, g);
  atomicAdd(dbeta + c, b);
}

}  // namespace

void layernorm_forward(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean, float* rstd, int N,
                       int C, float eps, cudaStream_t stream) {
  detail::require(N > 0 && C > 0, "layernorm_forward: N and C must be positive");
  layernorm_fwd_kernel<<<dev::blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
      dev::cu(x), dev::cu(gamma), dev::cu(beta), dev::cu(y), mean, rstd, N, C, eps);
  FORESIGHT_CUDA_LAUNCHED("layernorm_forward");
}

void layernorm_backward(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean, const float* rstd,
                        bf16* dx, float* dgamma, float* dbeta, int N, int C, cudaStream_t stream) {
  detail::require(N > 0 && C > 0, "layernorm_backward: N and C must be positive");
  layernorm_bwd_dx_kernel<<<dev::blocks_for(N, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
      dev::cu(dy), dev::cu(x), dev::cu(gamma), mean, rstd, dev::cu(dx), N, C);
  FORESIGHT_CUDA_LAUNCHED("layernorm_backward dx");
  const dim3 grid(dev::blocks_for(C, 256), dev::blocks_for(N, kParamRows));
  detail::require(grid.y <= 65535u, "layernorm_backward: N too large");
  layernorm_bwd_params_kernel<<<grid, 256, 0, stream>>>(dev::cu(dy), dev::cu(x), mean, rstd, dgamma, dbeta, N, C);
  FORESIGHT_CUDA_LAUNCHED("layernorm_backward dgamma dbeta");
}

}  // namespace foresight::kernels
