// Softmax cross-entropy over the LM head's logits, fused with its gradient (llm.c's
// fused_classifier): one block per row; pass 1 finds the row's max and sum of exp online, pass 2
// writes (softmax - onehot) * dloss, in place when dlogits aliases logits (each element is read
// and then written by the same thread, after the block has finished pass 1).
#include <cfloat>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

constexpr int kThreads = 512;

// Merges two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
  m = mn;
}

__global__ void xent_kernel(const __nv_bfloat16* logits, const int* targets, float* losses, __nv_bfloat16* dlogits,
                            int V, float dloss) {
  const long row = blockIdx.x;
  const __nv_bfloat16* l = logits + row * V;
  const int t = targets[row];
  float m = -INFINITY, s = 0;
  for (int v = threadIdx.x; v < V; v += kThreads) merge(m, s, dev::to_f(l[v]), 1.0f);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  __shared__ float row_max, row_sum, target_logit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = sm[0], S = ss[0];
    for (int w = 1; w < kThreads / 32; ++w) merge(M, S, sm[w], ss[w]);
    row_max = M;
    row_sum = S;
    target_logit = (t >= 0 && t < V) ? dev::to_f(l[t]) : 0.0f;
  }
  __syncthreads();  // every read of pass 1 happens before any write of pass 2
  const bool ignored = t < 0 || t >= V;
  if (threadIdx.x == 0) losses[row] = ignored ? 0.0f : logf(row_sum) + row_max - target_logit;
  if (!dlogits) return;
  __nv_bfloat16* d = dlogits + row * V;
  const float inv = 1.0f / row_sum;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    const float p = __expf(dev::to_f(l[v]) - row_max) * inv;
    d[v] = dev::to_b(ignored ? 0.0f : (p - (v == t ? 1.0f : 0.0f)) * dloss);
  }
}

}  // namespace

void softmax_cross_entropy(const bf16* logits, const std::int32_t* targets, float* losses, bf16* dlogits, int N, int V,
                           float dloss, cudaStream_t stream) {
  detail::require(N > 0 && V > 0, "softmax_cross_entropy: N and V must be positive");
  xent_kernel<<<N, kThreads, 0, stream>>>(dev::cu(logits), targets, losses, dlogits ? dev::cu(dlogits) : nullptr, V,
                                          dloss);
  FORESIGHT_CUDA_LAUNCHED("softmax_cross_entropy");
}

}  // namespace foresight::kernels
