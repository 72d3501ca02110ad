// Mixture-of-Experts routing: top-k router with capacity, token permute/unpermute and their
// backward passes (semantics: kernels/reference.hpp). The router runs one thread per token (E and
// k are small); capacity slots are assigned by one block per expert scanning every assignment in
// priority order with a block-wide prefix sum, so slots are deterministic and match the reference.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

constexpr int kMaxK = 8;
constexpr int kScanThreads = 256;
constexpr int kRowThreads = 128;

__global__ void router_topk_kernel(const float* logits, int N, int E, int k, bool normalize, int* expert, float* gate) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + long(n) * E;
  float mx = -INFINITY;
  for (int e = 0; e < E; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0;
  for (int e = 0; e < E; ++e) sum += expf(l[e] - mx);
  int picked[kMaxK];
  float prob[kMaxK];
  float psum = 0;
  for (int c = 0; c < k; ++c) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int cc = 0; cc < c; ++cc) taken |= picked[cc] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;  // softmax is monotone: compare logits; ties -> lower id
    }
    picked[c] = best;
    prob[c] = expf(l[best] - mx) / sum;
    psum += prob[c];
  }
  for (int c = 0; c < k; ++c) {
    expert[long(n) * k + c] = picked[c];
    gate[long(n) * k + c] = normalize ? prob[c] / psum : prob[c];
  }
}

// Block e assigns slots to every assignment routed to expert e, in choice-major priority order.
__global__ void router_capacity_kernel(const int* expert, int N, int k, int capacity, int* slot, int* counts) {
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int e = blockIdx.x;
  const long total = long(N) * k;
  int base = 0;  // assignments to e in earlier chunks (the same in every thread)
  for (long a0 = 0; a0 < total; a0 += kScanThreads) {
    const long a = a0 + threadIdx.x;  // priority index: choice a / N of token a % N
    long idx = 0;
    int flag = 0;
    if (a < total) {
      idx = (a % N) * k + a / N;
      flag = expert[idx] == e ? 1 : 0;
    }
    int prefix = 0, chunk_total = 0;
    Scan(tmp).ExclusiveSum(flag, prefix, chunk_total);
    if (flag) slot[idx] = base + prefix < capacity ? base + prefix : -1;
    base += chunk_total;
    __syncthreads();  // tmp is reused by the next chunk's scan
  }
  if (threadIdx.x == 0) counts[e] = min(base, capacity);
}

__global__ void router_backward_kernel(const float* logits, const int* expert, const float* dgate, int N, int E, int k,
                                       bool normalize, float* dlogits) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + long(n) * E;
  float mx = -INFINITY;
  for (int e = 0; e < E; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0;
  for (int e = 0; e < E; ++e) sum += expf(l[e] - mx);
  int picked[kMaxK];
  float p[kMaxK], dp[kMaxK];
  float S = 0;
  for (int c = 0; c < k; ++c) {
    picked[c] = expert[long(n) * k + c];
    p[c] = expf(l[picked[c]] - mx) / sum;
    S += p[c];
  }
  // Normalised gates g = p / S over the picked set: dL/dp_j = (dg_j - sum dg_i g_i) / S.
  float dot = 0;
  for (int c = 0; c < k; ++c) dot += dgate[long(n) * k + c] * p[c] / S;
  float pdp = 0;
  for (int c = 0; c < k; ++c) {
    const float dg = dgate[long(n) * k + c];
    dp[c] = normalize ? (dg - dot) / S : dg;
    pdp += p[c] * dp[c];
  }
  // Softmax backward: dl_e = p_e (dp_e - sum p dp), dp_e = 0 for experts not picked.
  for (int e = 0; e < E; ++e) {
    float dpe = 0;
    for (int c = 0; c < k; ++c)
      if (picked[c] == e) dpe = dp[c];
    dlogits[long(n) * E + e] = expf(l[e] - mx) / sum * (dpe - pdp);
  }
}

__global__ void permute_kernel(const __nv_bfloat16* x, const int* expert, const int* slot, __nv_bfloat16* out, int k,
                               int C, int capacity) {
  const long a = blockIdx.x;
  const int s = slot[a];
  if (s < 0) return;
  const long src = (a / k) * C, dst = (long(expert[a]) * capacity + s) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[dst + c] = x[src + c];
}

__global__ void permute_backward_kernel(const __nv_bfloat16* dout, const int* expert, const int* slot,
                                        __nv_bfloat16* dx, int k, int C, int capacity) {
  const long n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int j = 0; j < k; ++j) {
      const long a = n * k + j;
      if (slot[a] >= 0) s += dev::to_f(dout[(long(expert[a]) * capacity + slot[a]) * C + c]);
    }
    dx[n * C + c] = dev::to_b(s);
  }
}

__global__ void unpermute_kernel(const __nv_bfloat16* eo, const int* expert, const int* slot, const float* gate,
                                 __nv_bfloat16* y, int k, int C, int capacity) {
  const long n = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0;
    for (int j = 0; j < k; ++j) {
      const long a = n * k + j;
      if (slot[a] >= 0) s += gate[a] * dev::to_f(eo[(long(expert[a]) * capacity + slot[a]) * C + c]);
    }
    y[n * C + c] = dev::to_b(s);
  }
}

__global__ void unpermute_backward_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* eo, const int* expert,
                                          const int* slot, const float* gate, __nv_bfloat16* deo, float* dgate, int k,
                                          int C, int capacity) {
  const long a = blockIdx.x;
  const int s = slot[a];
  if (s < 0) {  // dropped: no output, no gradient (its d_expert_out row stays zero)
    if (threadIdx.x == 0) dgate[a] = 0;
    return;
  }
  const long row = (long(expert[a]) * capacity + s) * C, src = (a / k) * C;
  const float g = gate[a];
  float dot = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = dev::to_f(dy[src + c]);
    deo[row + c] = dev::to_b(g * d);
    dot += d * dev::to_f(eo[row + c]);
  }
  __shared__ float partial[kRowThreads / 32];
  dot = dev::warp_sum(dot);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = dot;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s2 = 0;
    for (int w = 0; w < kRowThreads / 32; ++w) s2 += partial[w];
    dgate[a] = s2;
  }
}

void check_moe(int N, int k, int C, const char* who) {
  detail::require(N > 0 && k >= 1 && k <= kMaxK && C > 0, std::string(who) + ": need N, C > 0 and 1 <= k <= 8");
}

}  // namespace

void moe_router_forward(const float* logits, int N, int E, int k, int capacity, bool normalize, std::int32_t* expert,
                        float* gate, std::int32_t* slot, std::int32_t* counts, cudaStream_t stream) {
  check_moe(N, k, 1, "moe_router_forward");
  detail::require(k <= E && capacity >= 0, "moe_router_forward: need k <= E and capacity >= 0");
  router_topk_kernel<<<dev::blocks_for(N, 128), 128, 0, stream>>>(logits, N, E, k, normalize, expert, gate);
  FORESIGHT_CUDA_LAUNCHED("moe_router_forward top-k");
  router_capacity_kernel<<<E, kScanThreads, 0, stream>>>(expert, N, k, capacity, slot, counts);
  FORESIGHT_CUDA_LAUNCHED("moe_router_forward capacity");
}

void moe_router_backward(const float* logits, const std::int32_t* expert, const float* dgate, int N, int E, int k,
                         bool normalize, float* dlogits, cudaStream_t stream) {
  check_moe(N, k, 1, "moe_router_backward");
  router_backward_kernel<<<dev::blocks_for(N, 128), 128, 0, stream>>>(logits, expert, dgate, N, E, k, normalize,
                                                                      dlogits);
  FORESIGHT_CUDA_LAUNCHED("moe_router_backward");
}

void moe_permute(const bf16* x, const std::int32_t* expert, const std::int32_t* slot, bf16* out, int N, int k, int C,
                 int E, int capacity, cudaStream_t stream) {
  check_moe(N, k, C, "moe_permute");
  FORESIGHT_CUDA(cudaMemsetAsync(out, 0, std::size_t(E) * capacity * C * sizeof(bf16), stream));
  permute_kernel<<<unsigned(long(N) * k), kRowThreads, 0, stream>>>(dev::cu(x), expert, slot, dev::cu(out), k, C,
                                                                    capacity);
  FORESIGHT_CUDA_LAUNCHED("moe_permute");
}

void moe_permute_backward(const bf16* dout, const std::int32_t* expert, const std::int32_t* slot, bf16* dx, int N, int k,
                          int C, int capacity, cudaStream_t stream) {
  check_moe(N, k, C, "moe_permute_backward");
  permute_backward_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dev::cu(dout), expert, slot, dev::cu(dx), k, C,
                                                                   capacity);
  FORESIGHT_CUDA_LAUNCHED("moe_permute_backward");
}

void moe_unpermute(const bf16* expert_out, const std::int32_t* expert, const std::int32_t* slot, const float* gate,
                   bf16* y, int N, int k, int C, int capacity, cudaStream_t stream) {
  check_moe(N, k, C, "moe_unpermute");
  unpermute_kernel<<<unsigned(N), kRowThreads, 0, stream>>>(dev::cu(expert_out), expert, slot, gate, dev::cu(y), k, C,
                                                            capacity);
  FORESIGHT_CUDA_LAUNCHED("moe_unpermute");
}

void moe_unpermute_backward(const bf16* dy, const bf16* expert_out, const std::int32_t* expert, const std::int32_t* slot,
                            const float* gate, bf16* d_expert_out, float* dgate, int N, int k, int C, int E,
                            int capacity, cudaStream_t stream) {
  check_moe(N, k, C, "moe_unpermute_backward");
  FORESIGHT_CUDA(cudaMemsetAsync(d_expert_out, 0, std::size_t(E) * capacity * C * sizeof(bf16), stream));
  unpermute_backward_kernel<<<unsigned(long(N) * k), kRowThreads, 0, stream>>>(
      dev::cu(dy), dev::cu(expert_out), expert, slot, gate, dev::cu(d_expert_out), dgate, k, C, capacity);
  FORESIGHT_CUDA_LAUNCHED("moe_unpermute_backward");
}

}  // namespace foresight::kernels
