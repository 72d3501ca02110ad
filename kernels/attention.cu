// Causal attention, FlashAttention-2 structure (Dao 2023, Algorithms 1 and 2) in plain fp32 CUDA
// cores: bf16 in and out, fp32 math, no tensor cores yet. Written for obvious correctness first:
//  - forward: a block takes 8 query rows of one (batch, head), one warp per row; it walks 32-key
//    tiles staged in shared memory; lane j scores key j, the warp keeps the online-softmax max and
//    sum, and each lane accumulates D/32 output columns. Saves lse = max + log(sum).
//  - backward: rowsum(dO o) first; then dK, dV with one warp per key row walking query tiles, and
//    dQ with one warp per query row walking key tiles. Probabilities are recomputed from lse in
//    both; no atomics, so the result is deterministic.
// Left out: tensor-core (mma) tiles, which a fast version needs (this one is expected to run an
// order of magnitude below FlashAttention-2 on an H100), dropout, non-causal and varlen batches.
#include <cmath>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

constexpr int kRows = 8;   // query (or key) rows per block, one warp each
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile, one per lane
constexpr unsigned kFull = 0xffffffffu;

// Offset of element (b, t, h, 0) of a (B, T, H, D) tensor.
__device__ __forceinline__ long row_at(int b, int t, int h, int T, int H, int D) {
  return ((long(b) * T + t) * H + h) * D;
}

template <int D>
__global__ void __launch_bounds__(32 * kRows)
    attn_fwd_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o, float* lse,
                    int T, int H, float scale) {
  constexpr int kPer = D / 32;
  __shared__ float Ks[kTile][D + 1];  // +1: lane j reads row j along d without bank conflicts
  __shared__ float Vs[kTile][D];
  __shared__ float Qs[kRows][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int row0 = blockIdx.x * kRows;
  const int i = row0 + warp;
  const bool active = i < T;
  if (active)
    for (int d = lane; d < D; d += 32) Qs[warp][d] = dev::to_f(q[row_at(b, i, h, T, H, D) + d]) * scale;
  float m = -INFINITY, l = 0;
  float acc[kPer];
  for (int c = 0; c < kPer; ++c) acc[c] = 0;
  const int last = min(T - 1, row0 + kRows - 1);  // the block's last query row sees keys 0..last
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and Qs is written)
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int jj = e / D, d = e % D, j = j0 + jj;
      Ks[jj][d] = j < T ? dev::to_f(k[row_at(b, j, h, T, H, D) + d]) : 0.0f;
      Vs[jj][d] = j < T ? dev::to_f(v[row_at(b, j, h, T, H, D) + d]) : 0.0f;
    }
    __syncthreads();
    if (!active || j0 > i) continue;  // warp-uniform; every thread still meets every barrier
    const int j = j0 + lane;
    float s = -INFINITY;
    if (j <= i) {
      float dot = 0;
      for (int d = 0; d < D; ++d) dot += Qs[warp][d] * Ks[lane][d];
      s = dot;
    }
    const float m_new = fmaxf(m, dev::warp_max(s));  // finite: key j0 <= i is visible to lane 0
    const float p = expf(s - m_new);                  // 0 where masked
    const float corr = expf(m - m_new);               // 0 on the first tile (m = -inf)
    l = l * corr + dev::warp_sum(p);
    for (int c = 0; c < kPer; ++c) acc[c] *= corr;
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
      for (int c = 0; c < kPer; ++c) acc[c] += pj * Vs[jj][lane + 32 * c];
    }
    m = m_new;
  }
  if (!active) return;
  const float inv = 1.0f / l;
  for (int c = 0; c < kPer; ++c) o[row_at(b, i, h, T, H, D) + lane + 32 * c] = dev::to_b(acc[c] * inv);
  if (lane == 0) lse[(long(b) * H + h) * T + i] = m + logf(l);
}

// Dvec (B, H, T) = rowsum(dO * o): one warp per (b, t, h) row.
template <int D>
__global__ void attn_bwd_dot_kernel(const __nv_bfloat16* o, const __nv_bfloat16* dout, float* dvec, int T, int H,
                                    long rows) {
  const long r = long(blockIdx.x) * kRows + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float s = 0;
  for (int d = lane; d < D; d += 32) s += dev::to_f(o[r * D + d]) * dev::to_f(dout[r * D + d]);
  s = dev::warp_sum(s);
  const int h = int(r % H), t = int((r / H) % T), b = int(r / (long(H) * T));
  if (lane == 0) dvec[(long(b) * H + h) * T + t] = s;
}

template <int D>
__global__ void __launch_bounds__(32 * kRows)
    attn_bwd_dkdv_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                         const __nv_bfloat16* dout, const float* lse, const float* dvec, __nv_bfloat16* dk,
                         __nv_bfloat16* dv, int T, int H, float scale) {
  constexpr int kPer = D / 32;
  __shared__ float Qs[kTile][D + 1];
  __shared__ float dOs[kTile][D + 1];
  __shared__ float Kw[kRows][D], Vw[kRows][D];
  __shared__ float lse_s[kTile], dvec_s[kTile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int j = blockIdx.x * kRows + warp;  // this warp's key row
  const bool active = j < T;
  if (active)
    for (int d = lane; d < D; d += 32) {
      Kw[warp][d] = dev::to_f(k[row_at(b, j, h, T, H, D) + d]);
      Vw[warp][d] = dev::to_f(v[row_at(b, j, h, T, H, D) + d]);
    }
  float gk[kPer], gv[kPer];
  for (int c = 0; c < kPer; ++c) gk[c] = gv[c] = 0;
  const long stat0 = (long(b) * H + h) * T;
  // Queries before the block's first key see none of its keys: start at that key's tile.
  for (int i0 = (blockIdx.x * kRows / kTile) * kTile; i0 < T; i0 += kTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int ii = e / D, d = e % D, i = i0 + ii;
      Qs[ii][d] = i < T ? dev::to_f(q[row_at(b, i, h, T, H, D) + d]) : 0.0f;
      dOs[ii][d] = i < T ? dev::to_f(dout[row_at(b, i, h, T, H, D) + d]) : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[threadIdx.x] = i < T ? lse[stat0 + i] : 0.0f;
      dvec_s[threadIdx.x] = i < T ? dvec[stat0 + i] : 0.0f;
    }
    __syncthreads();
    if (!active || i0 + kTile - 1 < j) continue;  // no query of this tile sees key j
    const int i = i0 + lane;
    float p = 0, ds = 0;
    if (i < T && i >= j) {
      float s = 0, dp = 0;
      for (int d = 0; d < D; ++d) {
        s += Qs[lane][d] * Kw[warp][d];
        dp += dOs[lane][d] * Vw[warp][d];
      }
      p = expf(s * scale - lse_s[lane]);
      ds = p * (dp - dvec_s[lane]);
    }
    for (int ii = 0; ii < kTile; ++ii) {
      const float pi = __shfl_sync(kFull, p, ii), dsi = __shfl_sync(kFull, ds, ii);
      for (int c = 0; c < kPer; ++c) {
        gv[c] += pi * dOs[ii][lane + 32 * c];
        gk[c] += dsi * Qs[ii][lane + 32 * c];
      }
    }
  }
  if (!active) return;
  for (int c = 0; c < kPer; ++c) {
    dk[row_at(b, j, h, T, H, D) + lane + 32 * c] = dev::to_b(gk[c] * scale);
    dv[row_at(b, j, h, T, H, D) + lane + 32 * c] = dev::to_b(gv[c]);
  }
}

template <int D>
__global__ void __launch_bounds__(32 * kRows)
    attn_bwd_dq_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       const __nv_bfloat16* dout, const float* lse, const float* dvec, __nv_bfloat16* dq, int T, int H,
                       float scale) {
  constexpr int kPer = D / 32;
  __shared__ float Ks[kTile][D + 1];
  __shared__ float Vs[kTile][D + 1];
  __shared__ float Qw[kRows][D], dOw[kRows][D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.y / H, h = blockIdx.y % H;
  const int row0 = blockIdx.x * kRows;
  const int i = row0 + warp;
  const bool active = i < T;
  float lse_i = 0, dvec_i = 0;
  if (active) {
    for (int d = lane; d < D; d += 32) {
      Qw[warp][d] = dev::to_f(q[row_at(b, i, h, T, H, D) + d]);
      dOw[warp][d] = dev::to_f(dout[row_at(b, i, h, T, H, D) + d]);
    }
    lse_i = lse[(long(b) * H + h) * T + i];
    dvec_i = dvec[(long(b) * H + h) * T + i];
  }
  float gq[kPer];
  for (int c = 0; c < kPer; ++c) gq[c] = 0;
  const int last = min(T - 1, row0 + kRows - 1);
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int jj = e / D, d = e % D, j = j0 + jj;
      Ks[jj][d] = j < T ? dev::to_f(k[row_at(b, j, h, T, H, D) + d]) : 0.0f;
      Vs[jj][d] = j < T ? dev::to_f(v[row_at(b, j, h, T, H, D) + d]) : 0.0f;
    }
    __syncthreads();
    if (!active || j0 > i) continue;
    const int j = j0 + lane;
    float ds = 0;
    if (j <= i) {
      float s = 0, dp = 0;
      for (int d = 0; d < D; ++d) {
        s += Qw[warp][d] * Ks[lane][d];
        dp += dOw[warp][d] * Vs[lane][d];
      }
      const float p = expf(s * scale - lse_i);
      ds = p * (dp - dvec_i);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const float dsj = __shfl_sync(kFull, ds, jj);
      for (int c = 0; c < kPer; ++c) gq[c] += dsj * Ks[jj][lane + 32 * c];
    }
  }
  if (!active) return;
  for (int c = 0; c < kPer; ++c) dq[row_at(b, i, h, T, H, D) + lane + 32 * c] = dev::to_b(gq[c] * scale);
}

float scale_of(const AttentionShape& s) { return s.scale != 0 ? s.scale : 1.0f / std::sqrt(float(s.D)); }

void check_shape(const AttentionShape& s, const char* who) {
  detail::require(s.B > 0 && s.T > 0 && s.H > 0, std::string(who) + ": B, T, H must be positive");
  detail::require(s.D == 32 || s.D == 64 || s.D == 128, std::string(who) + ": head dim must be 32, 64 or 128");
  detail::require(long(s.B) * s.H <= 65535, std::string(who) + ": B * H must be at most 65535");
}

template <int D>
void forward_d(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
               cudaStream_t stream) {
  const dim3 grid(dev::blocks_for(s.T, kRows), s.B * s.H);
  attn_fwd_kernel<D><<<grid, 32 * kRows, 0, stream>>>(dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(o), lse, s.T, s.H,
                                                      scale_of(s));
  FORESIGHT_CUDA_LAUNCHED("attention_forward");
}

template <int D>
void backward_d(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                bf16* dq, bf16* dk, bf16* dv, float* dvec, const AttentionShape& s, cudaStream_t stream) {
  const long rows = long(s.B) * s.T * s.H;
  attn_bwd_dot_kernel<D><<<dev::blocks_for(rows, kRows), 32 * kRows, 0, stream>>>(dev::cu(o), dev::cu(dout), dvec, s.T,
                                                                                  s.H, rows);
  FORESIGHT_CUDA_LAUNCHED("attention_backward rowsum");
  const dim3 grid(dev::blocks_for(s.T, kRows), s.B * s.H);
  attn_bwd_dkdv_kernel<D><<<grid, 32 * kRows, 0, stream>>>(dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(dout), lse, dvec,
                                                           dev::cu(dk), dev::cu(dv), s.T, s.H, scale_of(s));
  FORESIGHT_CUDA_LAUNCHED("attention_backward dk dv");
  attn_bwd_dq_kernel<D><<<grid, 32 * kRows, 0, stream>>>(dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(dout), lse, dvec,
                                                         dev::cu(dq), s.T, s.H, scale_of(s));
  FORESIGHT_CUDA_LAUNCHED("attention_backward dq");
}

}  // namespace

void attention_forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
                       cudaStream_t stream) {
  check_shape(s, "attention_forward");
  switch (s.D) {
    case 32: return forward_d<32>(q, k, v, o, lse, s, stream);
    case 64: return forward_d<64>(q, k, v, o, lse, s, stream);
    default: return forward_d<128>(q, k, v, o, lse, s, stream);
  }
}

std::size_t attention_backward_workspace_bytes(const AttentionShape& s) {
  return std::size_t(s.B) * s.H * s.T * sizeof(float);
}

void attention_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                        bf16* dq, bf16* dk, bf16* dv, void* workspace, const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "attention_backward");
  detail::require(workspace != nullptr, "attention_backward: needs attention_backward_workspace_bytes of workspace");
  float* dvec = static_cast<float*>(workspace);
  switch (s.D) {
    case 32: return backward_d<32>(q, k, v, o, dout, lse, dq, dk, dv, dvec, s, stream);
    case 64: return backward_d<64>(q, k, v, o, dout, lse, dq, dk, dv, dvec, s, stream);
    default: return backward_d<128>(q, k, v, o, dout, lse, dq, dk, dv, dvec, s, stream);
  }
}

}  // namespace foresight::kernels
