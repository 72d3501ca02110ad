// Kernels of the trainer's CUDA backend: one per CpuBackend loop, written for agreement with it
// rather than speed (reductions in double, fixed summation orders where the CPU's order is part of
// its contract, e.g. embedding gradients accumulated token by token). GEMMs and attention's
// batched products go to cuBLAS in cuda_backend.cpp; these are the memory-bound rest. Each kernel
// is a template over the storage type (float or __nv_bfloat16) of its tensor arguments: ld()
// reads an element as a float, st() writes the float the CPU backend would store, rounded to
// nearest even when the tensor is bf16 (the CPU rounds the same float with kernels::round_bf16).
// With every type float the arithmetic is what it was before bf16 existed, operation for operation.
#include "trainer/cuda_backend_kernels.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.hpp"

namespace foresight::trainer::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;

__device__ __forceinline__ float ld(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

int blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return int(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

// Sum over the block in double; every thread gets the result. Fixed tree order: deterministic.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double r = shared[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

template <class T>
__global__ void fill_k(T* p, std::int64_t n, float v) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    st(p, i, v);
}

template <class D, class S>
__global__ void convert_k(D* dst, const S* src, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    st(dst, i, ld(src, i));
}

template <class Y, class X>
__global__ void add_k(Y* y, const X* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    st(y, i, ld(y, i) + ld(x, i));
}

template <class T>
__global__ void sum_squares_partial_k(const T* x, std::int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const double v = ld(x, i);
    s += v * v;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_k(const double* partial, int count, double* result) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *result = s;
}

template <class T>
__global__ void non_finite_k(const T* x, std::int64_t n, int* flag) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    if (!isfinite(ld(x, i))) *flag = 1;
}

template <class Y, class B>
__global__ void add_bias_k(Y* y, const B* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    st(y, i, ld(y, i) + ld(bias, i % cols));
}

// Column sums in two deterministic stages (the one-thread-per-column loop over every row ran a
// 16384 x 4096 bias gradient on 16 blocks, ~50 ms): stage 1 gives each (column, chunk of
// kColumnChunkRows rows) one thread summing its rows in order in double, into partial[chunk][col];
// stage 2 adds a column's chunks in chunk order. Coalesced across a warp's columns both times.
template <class T>
__global__ void column_partial_k(double* partial, const T* dy, std::int64_t rows, std::int64_t cols) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kColumnChunkRows;
  const std::int64_t r1 = r0 + kColumnChunkRows < rows ? r0 + kColumnChunkRows : rows;
  double s = 0;
  for (std::int64_t n = r0; n < r1; ++n) s += ld(dy, n * cols + j);
  partial[blockIdx.y * cols + j] = s;
}

template <class G>
__global__ void column_finish_k(G* out, const double* partial, std::int64_t chunks, std::int64_t cols) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  double s = 0;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c * cols + j];
  st(out, j, float(ld(out, j) + s));
}

template <class T, class W>
__global__ void layernorm_forward_k(T* y, float* mean, float* rstd, const T* x, const W* gamma, const W* beta,
                                    std::int64_t cols, double eps) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const T* xr = x + n * cols;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += ld(xr, j);
  const double mu = block_sum(s, sh) / double(cols);
  double v = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) v += (ld(xr, j) - mu) * (ld(xr, j) - mu);
  const double var = block_sum(v, sh) / double(cols);
  const double rs = 1.0 / sqrt(var + eps);
  if (threadIdx.x == 0) {
    mean[n] = float(mu);
    rstd[n] = float(rs);
  }
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    st(y, n * cols + j, float((ld(xr, j) - mu) * rs * ld(gamma, j) + ld(beta, j)));
}

template <class T, class W>
__global__ void layernorm_backward_dx_k(T* dx, const T* dy, const T* x, const float* mean, const float* rstd,
                                        const W* gamma, std::int64_t cols) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const T* xr = x + n * cols;
  const T* dyr = dy + n * cols;
  const double mu = mean[n], rs = rstd[n];
  double a = 0, b = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (ld(xr, j) - mu) * rs;
    const double dxhat = double(ld(dyr, j)) * ld(gamma, j);
    a += dxhat;
    b += dxhat * xhat;
  }
  const double mean_dxhat = block_sum(a, sh) / double(cols);
  const double mean_dxhat_xhat = block_sum(b, sh) / double(cols);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (ld(xr, j) - mu) * rs;
    const double dxhat = double(ld(dyr, j)) * ld(gamma, j);
    st(dx, n * cols + j, float(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)));
  }
}

template <class T>
__global__ void layernorm_params_partial_k(double* pg, double* pb, const T* dy, const T* x, const float* mean,
                                           const float* rstd, std::int64_t rows, std::int64_t cols) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kColumnChunkRows;
  const std::int64_t r1 = r0 + kColumnChunkRows < rows ? r0 + kColumnChunkRows : rows;
  double dg = 0, db = 0;
  for (std::int64_t n = r0; n < r1; ++n) {
    const double xhat = (ld(x, n * cols + j) - double(mean[n])) * double(rstd[n]);
    dg += double(ld(dy, n * cols + j)) * xhat;
    db += ld(dy, n * cols + j);
  }
  pg[blockIdx.y * cols + j] = dg;
  pb[blockIdx.y * cols + j] = db;
}

// GeLU, softmax and cross-entropy evaluate tanh and exp in float (tanhf, expf: within 2 ulp):
// in double they ran on the FP64 units, a large share of a step's elementwise time; sums stay
// double. Against the CPU backend's double evaluation the outputs differ by float rounding
// (~1e-7 relative), far inside the GPU tests' tolerances (2e-5 fp32, one bf16 ulp).
constexpr float kSqrt2OverPiF = 0.7978845608f;

// GeLU's 0.5 (1 + tanh u) written as the logistic 1 / (1 + e^(-2u)) (the same function): for very
// negative inputs 1 + tanh u cancels to nothing in float (x < -4 already), the logistic keeps its
// relative precision. The CPU backend uses the same form in double (cpu_backend.cpp).
__device__ __forceinline__ float gelu_sigmoid(float v) {
  const float u = kSqrt2OverPiF * (v + 0.044715f * v * v * v);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

template <class T>
__global__ void gelu_forward_k(T* y, const T* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = ld(x, i);
    st(y, i, v * gelu_sigmoid(v));
  }
}

// The pre-activation p = sum + bias (the float add the CPU makes) stored rounded, and GeLU(p) of
// the unrounded p: matmul_bias_gelu's roundings without cuBLASLt's epilogue.
template <class O, class B>
__global__ void bias_gelu_from_fp32_k(O* y, O* pre, const float* sum, const B* bias, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = sum[i] + ld(bias, i % cols);
    st(pre, i, v);
    st(y, i, v * gelu_sigmoid(v));
  }
}

template <class T, class Y, class X>
__global__ void gelu_backward_k(T* dx, const Y* dy, const X* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = ld(x, i);
    const float s = gelu_sigmoid(v);
    const float d = s + 2.0f * v * s * (1.0f - s) * kSqrt2OverPiF * (1.0f + 3.0f * 0.044715f * v * v);
    st(dx, i, ld(dy, i) * d);
  }
}

template <class T>
__global__ void causal_softmax_k(T* scores, std::int64_t seq, std::int64_t keys) {
  __shared__ double sh[kThreads];
  __shared__ float shf[kThreads];
  const std::int64_t r = blockIdx.x;
  const std::int64_t last = keys - seq + r % seq;  // the query sees keys 0 .. last
  T* row = scores + r * keys;
  float mx = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) mx = fmaxf(mx, ld(row, j));
  mx = block_max(mx, shf);
  double s = 0;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) s += expf(ld(row, j) - mx);
  s = block_sum(s, sh);
  const float inv = float(1.0 / s);
  // Each thread rewrites only the elements it read above.
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
    st(row, j, j <= last ? expf(ld(row, j) - mx) * inv : 0.0f);
}

template <class T>
__global__ void softmax_backward_k(T* dp, const T* p, std::int64_t keys) {
  __shared__ double sh[kThreads];
  const std::int64_t r = blockIdx.x;
  T* d = dp + r * keys;
  const T* pr = p + r * keys;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) s += double(ld(pr, j)) * ld(d, j);
  s = block_sum(s, sh);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) st(d, j, float(double(ld(pr, j)) * (ld(d, j) - s)));
}

template <class T>
__global__ void embedding_forward_k(T* x, const T* table, const std::int32_t* tokens, std::int64_t rows,
                                    std::int64_t cols, std::int64_t table_rows, std::int64_t offset) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / cols, j = i % cols;
    const std::int64_t r = std::int64_t(tokens[n]) - offset;
    st(x, i, (r >= 0 && r < table_rows) ? ld(table, r * cols + j) : 0.0f);
  }
}

// One block per distinct token: its rows (ascending, `order[first[u]] .. order[first[u+1]-1]`) are
// added into its table row one after another in float, exactly the CPU's additions in its order.
template <class T>
__global__ void embedding_backward_k(float* dtable, const T* dx, const std::int32_t* order, const std::int32_t* first,
                                     const std::int32_t* table_row, std::int64_t cols) {
  const std::int64_t u = blockIdx.x;
  const std::int64_t r = table_row[u];
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float acc = dtable[r * cols + j];
    for (std::int32_t k = first[u]; k < first[u + 1]; ++k) acc += ld(dx, std::int64_t(order[k]) * cols + j);
    dtable[r * cols + j] = acc;
  }
}

template <class T, class P>
__global__ void add_positions_k(T* x, const P* positions, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                                std::int64_t period, std::int64_t offset) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / cols, j = i % cols;
    st(x, i, ld(x, i) + ld(positions, (offset + (first_row + n) % period) * cols + j));
  }
}

template <class G, class T>
__global__ void positions_backward_k(G* dpositions, const T* dx, std::int64_t positions_rows, std::int64_t rows,
                                     std::int64_t cols, std::int64_t first_row, std::int64_t period,
                                     std::int64_t offset) {
  const std::int64_t total = positions_rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, j = i % cols;
    const std::int64_t k = r - offset;  // (first_row + n) % period must equal k
    double acc = 0;
    if (k >= 0 && k < period) {
      std::int64_t n0 = (k - first_row % period) % period;
      if (n0 < 0) n0 += period;
      for (std::int64_t n = n0; n < rows; n += period) acc += ld(dx, n * cols + j);
    }
    st(dpositions, i, float(ld(dpositions, i) + acc));
  }
}

// One thread per output element. The products and sums are rounded one by one (__dmul_rn,
// __dadd_rn: no fused multiply-add), as the CPU's double arithmetic does, so the two agree bit for bit.
template <class O, class S>
__global__ void gather_rows_weighted_k(O* out, const S* src, const std::int32_t* rows, const double* weights,
                                       std::int64_t out_rows, std::int64_t cols, int k) {
  const std::int64_t total = out_rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    double acc = 0;
    for (int j = 0; j < k; ++j) {
      const std::int64_t s = rows[r * k + j];
      if (s >= 0) acc = __dadd_rn(acc, __dmul_rn(weights[r * k + j], double(ld(src, s * cols + c))));
    }
    st(out, i, float(acc));
  }
}

// One warp per pair: its lanes stride the columns in double, then a shuffle reduction.
template <class A, class B>
__global__ void row_dots_k(double* dots, const A* a, const std::int32_t* a_rows, const B* b, const std::int32_t* b_rows,
                           std::int64_t pairs, std::int64_t cols) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / 32;
  // Every lane of a warp has the same i, so the whole warp takes part in each shuffle.
  for (std::int64_t i = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / 32; i < pairs; i += warps) {
    const std::int64_t ra = a_rows[i], rb = b_rows[i];
    double d = 0;
    if (ra >= 0 && rb >= 0)
      for (std::int64_t c = lane; c < cols; c += 32) d += double(ld(a, ra * cols + c)) * double(ld(b, rb * cols + c));
    for (int o = 16; o > 0; o /= 2) d += __shfl_down_sync(0xffffffffu, d, o);
    if (lane == 0) dots[i] = d;
  }
}

template <class T>
__global__ void logits_row_max_k(float* row_max, const T* logits, std::int64_t vocab) {
  __shared__ float sh[kThreads];
  const std::int64_t n = blockIdx.x;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, ld(logits, n * vocab + j));
  m = block_max(m, sh);
  if (threadIdx.x == 0) row_max[n] = m;
}

template <class T>
__global__ void logits_sum_exp_k(float* stats, const T* logits, const float* row_max, const std::int32_t* targets,
                                 std::int64_t vocab, std::int64_t offset) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const T* l = logits + n * vocab;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(ld(l, j) - row_max[n]);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    const std::int64_t t = std::int64_t(targets[n]) - offset;
    stats[2 * n] = float(s);
    stats[2 * n + 1] = (t >= 0 && t < vocab) ? ld(l, t) : 0.0f;
  }
}

template <class T>
__global__ void cross_entropy_backward_k(T* dlogits, const T* logits, const float* row_max, const float* stats,
                                         const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                         std::int64_t offset, float scale) {
  const std::int64_t total = rows * vocab;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / vocab, j = i % vocab;
    const float p = expf(ld(logits, i) - row_max[n]) / stats[2 * n];
    const std::int64_t t = std::int64_t(targets[n]) - offset;
    st(dlogits, i, scale * (p - (j == t ? 1.0f : 0.0f)));
  }
}

__global__ void adamw_k(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, float grad_scale, double c1, double c2) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const double g = double(grad[i]) * grad_scale;
    const double mi = double(beta1) * m[i] + (1.0 - beta1) * g;
    const double vi = double(beta2) * v[i] + (1.0 - beta2) * g * g;
    m[i] = float(mi);
    v[i] = float(vi);
    const double p = param[i];
    param[i] = float(p - double(lr) * ((mi / c1) / (sqrt(vi / c2) + eps) + double(weight_decay) * p));
  }
}

// 16-byte forms of the streaming kernels for packed bf16 (8 elements per load and store): the
// scalar kernels move 2 bytes per thread per access, which left add_bias, GeLU and add at a
// fraction of the memory bandwidth on the H200 (reports/gpu-2026-11-28). Same arithmetic per
// element as the scalar kernels (float math, one round to nearest even); used when every pointer
// is 16-byte aligned and the counts are multiples of 8.
struct Bf16x8 {
  float v[8];
};
__device__ __forceinline__ Bf16x8 load8(const bf16* p) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const std::uint32_t u[4] = {w.x, w.y, w.z, w.w};
  Bf16x8 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.v[2 * i] = __uint_as_float(u[i] << 16);
    r.v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
  return r;
}
__device__ __forceinline__ void store8(bf16* p, const Bf16x8& r) {
  std::uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    u[i] = std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(r.v[2 * i]))) |
           (std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(r.v[2 * i + 1]))) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(u[0], u[1], u[2], u[3]);
}

// y += x, x repeating every `period` elements (a multiple of 8): a bias row broadcast over the
// rows (period = cols), or a whole tensor (period = the element count).
__global__ void add_periodic_vec_k(bf16* y, const bf16* x, std::int64_t n8, std::int64_t period) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n8; i += std::int64_t(gridDim.x) * blockDim.x) {
    Bf16x8 a = load8(y + 8 * i);
    const Bf16x8 b = load8(x + (8 * i) % period);
#pragma unroll
    for (int k = 0; k < 8; ++k) a.v[k] += b.v[k];
    store8(y + 8 * i, a);
  }
}
__global__ void gelu_forward_vec_k(bf16* y, const bf16* x, std::int64_t n8) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n8; i += std::int64_t(gridDim.x) * blockDim.x) {
    Bf16x8 a = load8(x + 8 * i);
#pragma unroll
    for (int k = 0; k < 8; ++k) a.v[k] = a.v[k] * gelu_sigmoid(a.v[k]);
    store8(y + 8 * i, a);
  }
}
__global__ void gelu_backward_vec_k(bf16* dx, const bf16* dy, const bf16* x, std::int64_t n8) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n8; i += std::int64_t(gridDim.x) * blockDim.x) {
    const Bf16x8 v = load8(x + 8 * i);
    Bf16x8 g = load8(dy + 8 * i);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float s = gelu_sigmoid(v.v[k]);
      g.v[k] *= s + 2.0f * v.v[k] * s * (1.0f - s) * kSqrt2OverPiF * (1.0f + 3.0f * 0.044715f * v.v[k] * v.v[k]);
    }
    store8(dx + 8 * i, g);
  }
}
// fp32 -> bf16 (the master weights into the working copy, every step).
__global__ void convert_f32_bf16_vec_k(bf16* dst, const float* src, std::int64_t n8) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n8; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(src)[2 * i], b = reinterpret_cast<const float4*>(src)[2 * i + 1];
    store8(dst + 8 * i, Bf16x8{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}});
  }
}

// LayerNorm for packed bf16 rows (cols a multiple of 8): one warp per row, 16-byte loads, the
// row's sums in double across the warp (a shuffle tree instead of the block kernels' shared-memory
// tree and its eight barriers per reduction). The same formulas as layernorm_forward_k and
// layernorm_backward_dx_k; only the order of the double additions differs.
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
constexpr int kRowsPerBlock = kThreads / 32;

__global__ void layernorm_forward_vec_k(bf16* y, float* mean, float* rstd, const bf16* x, const bf16* gamma,
                                        const bf16* beta, std::int64_t rows, std::int64_t cols, double eps) {
  const int lane = threadIdx.x % 32;
  // Rows stride over the grid (blocks_for caps it); n is the same for every lane of a warp, so
  // whole warps leave the loop together and the shuffles below always see full warps.
  for (std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + threadIdx.x / 32; n < rows;
       n += std::int64_t(gridDim.x) * kRowsPerBlock) {
    const bf16* xr = x + n * cols;
    double s = 0;
    for (std::int64_t j = 8 * lane; j < cols; j += 256) {
      const Bf16x8 v = load8(xr + j);
#pragma unroll
      for (int k = 0; k < 8; ++k) s += v.v[k];
    }
    const double mu = warp_sum_d(s) / double(cols);
    double q = 0;
    for (std::int64_t j = 8 * lane; j < cols; j += 256) {
      const Bf16x8 v = load8(xr + j);
#pragma unroll
      for (int k = 0; k < 8; ++k) q += (v.v[k] - mu) * (v.v[k] - mu);
    }
    const double rs = 1.0 / sqrt(warp_sum_d(q) / double(cols) + eps);
    if (lane == 0) {
      mean[n] = float(mu);
      rstd[n] = float(rs);
    }
    for (std::int64_t j = 8 * lane; j < cols; j += 256) {
      const Bf16x8 v = load8(xr + j), g = load8(gamma + j), b = load8(beta + j);
      Bf16x8 o;
#pragma unroll
      for (int k = 0; k < 8; ++k) o.v[k] = float((v.v[k] - mu) * rs * g.v[k] + b.v[k]);
      store8(y + n * cols + j, o);
    }
  }
}

__global__ void layernorm_backward_dx_vec_k(bf16* dx, const bf16* dy, const bf16* x, const float* mean,
                                            const float* rstd, const bf16* gamma, std::int64_t rows,
                                            std::int64_t cols) {
  const int lane = threadIdx.x % 32;
  for (std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + threadIdx.x / 32; n < rows;
       n += std::int64_t(gridDim.x) * kRowsPerBlock) {  // warp-uniform, as the forward
    const bf16* xr = x + n * cols;
    const bf16* dyr = dy + n * cols;
    const double mu = mean[n], rs = rstd[n];
    double a = 0, b = 0;
    for (std::int64_t j = 8 * lane; j < cols; j += 256) {
      const Bf16x8 v = load8(xr + j), d = load8(dyr + j), g = load8(gamma + j);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const double xhat = (v.v[k] - mu) * rs, dxhat = double(d.v[k]) * g.v[k];
        a += dxhat;
        b += dxhat * xhat;
      }
    }
    const double ma = warp_sum_d(a) / double(cols), mb = warp_sum_d(b) / double(cols);
    for (std::int64_t j = 8 * lane; j < cols; j += 256) {
      const Bf16x8 v = load8(xr + j), d = load8(dyr + j), g = load8(gamma + j);
      Bf16x8 o;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const double xhat = (v.v[k] - mu) * rs, dxhat = double(d.v[k]) * g.v[k];
        o.v[k] = float(rs * (dxhat - ma - xhat * mb));
      }
      store8(dx + n * cols + j, o);
    }
  }
}

bool vec8(std::int64_t n, std::initializer_list<const void*> ps) {
  if (n % 8 != 0) return false;
  for (const void* p : ps)
    if ((reinterpret_cast<std::uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

// Storage dispatch: calls f with the tensor's elements as the pointer type they are stored in,
// so that one generic lambda instantiates a kernel for every storage type.
template <class F>
void typed(In e, F&& f) {
  if (e.type == Type::bf16)
    f(static_cast<const bf16*>(e.data));
  else
    f(static_cast<const float*>(e.data));
}
template <class F>
void typed(Out e, F&& f) {
  if (e.type == Type::bf16)
    f(static_cast<bf16*>(e.data));
  else
    f(static_cast<float*>(e.data));
}
/// For arguments that must share one storage type (an op's activations): fails otherwise.
void same_type(Type a, Type b, const char* op) {
  kernels::detail::require(a == b, std::string(op) + ": tensors of different storage types where one is expected");
}

}  // namespace

#define LAUNCH(kernel, grid, ...)                                 \
  do {                                                            \
    kernel<<<(grid), kThreads, 0, stream>>>(__VA_ARGS__);         \
    FORESIGHT_CUDA_LAUNCHED(#kernel);                             \
  } while (0)

void fill(Out p, std::int64_t n, float value, cudaStream_t stream) {
  if (n > 0) typed(p, [&](auto* d) { LAUNCH(fill_k, blocks_for(n), d, n, value); });
}
void convert(Out dst, In src, std::int64_t n, cudaStream_t stream) {
  if (n > 0 && dst.type == Type::bf16 && src.type == Type::fp32 && vec8(n, {dst.data, src.data})) {
    LAUNCH(convert_f32_bf16_vec_k, blocks_for(n / 8), static_cast<bf16*>(dst.data), static_cast<const float*>(src.data),
           n / 8);
    return;
  }
  if (n > 0)
    typed(dst, [&](auto* d) { typed(src, [&](auto* s) { LAUNCH(convert_k, blocks_for(n), d, s, n); }); });
}
void add(Out y, In x, std::int64_t n, cudaStream_t stream) {
  if (n > 0 && y.type == Type::bf16 && x.type == Type::bf16 && vec8(n, {y.data, x.data})) {
    LAUNCH(add_periodic_vec_k, blocks_for(n / 8), static_cast<bf16*>(y.data), static_cast<const bf16*>(x.data), n / 8, n);
    return;
  }
  if (n > 0) typed(y, [&](auto* py) { typed(x, [&](auto* px) { LAUNCH(add_k, blocks_for(n), py, px, n); }); });
}
void sum_squares(In x, std::int64_t n, double* scratch, double* result, cudaStream_t stream) {
  typed(x, [&](auto* px) { LAUNCH(sum_squares_partial_k, kSumBlocks, px, n, scratch); });
  LAUNCH(sum_partials_k, 1, scratch, kSumBlocks, result);
}
void any_non_finite(In x, std::int64_t n, int* flag, cudaStream_t stream) {
  if (n > 0) typed(x, [&](auto* px) { LAUNCH(non_finite_k, blocks_for(n), px, n, flag); });
}
void add_bias(Out y, In bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols > 0 && y.type == Type::bf16 && bias.type == Type::bf16 && cols % 8 == 0 &&
      vec8(rows * cols, {y.data, bias.data})) {
    LAUNCH(add_periodic_vec_k, blocks_for(rows * cols / 8), static_cast<bf16*>(y.data),
           static_cast<const bf16*>(bias.data), rows * cols / 8, cols);
    return;
  }
  if (rows * cols > 0)
    typed(y, [&](auto* py) { typed(bias, [&](auto* pb) { LAUNCH(add_bias_k, blocks_for(rows * cols), py, pb, rows, cols); }); });
}
std::int64_t column_scratch_doubles(std::int64_t rows, std::int64_t cols) {
  return std::max<std::int64_t>(1, (rows + kColumnChunkRows - 1) / kColumnChunkRows) * cols;
}
void bias_backward(Out dbias, In dy, std::int64_t rows, std::int64_t cols, double* scratch, cudaStream_t stream) {
  if (cols == 0) return;
  const std::int64_t chunks = (rows + kColumnChunkRows - 1) / kColumnChunkRows;
  if (chunks > 0) {
    kernels::detail::require(chunks < 65536, "bias_backward: more than 65535 row chunks");
    const dim3 grid(unsigned(blocks_for(cols)), unsigned(chunks));
    typed(dy, [&](auto* d) { LAUNCH(column_partial_k, grid, scratch, d, rows, cols); });
  }
  typed(dbias, [&](auto* g) { LAUNCH(column_finish_k, blocks_for(cols), g, scratch, chunks, cols); });
}
void layernorm_forward(Out y, float* mean, float* rstd, In x, In gamma, In beta, std::int64_t rows, std::int64_t cols,
                       double eps, cudaStream_t stream) {
  if (rows == 0) return;
  same_type(y.type, x.type, "layernorm_forward (y, x)");
  same_type(gamma.type, beta.type, "layernorm_forward (gamma, beta)");
  if (y.type == Type::bf16 && gamma.type == Type::bf16 && vec8(cols, {y.data, x.data, gamma.data, beta.data})) {
    LAUNCH(layernorm_forward_vec_k, blocks_for(rows, kRowsPerBlock), static_cast<bf16*>(y.data), mean, rstd,
           static_cast<const bf16*>(x.data), static_cast<const bf16*>(gamma.data), static_cast<const bf16*>(beta.data),
           rows, cols, eps);
    return;
  }
  typed(y, [&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    typed(gamma, [&](auto* pg) {
      using W = std::remove_const_t<std::remove_pointer_t<decltype(pg)>>;
      LAUNCH(layernorm_forward_k, int(rows), py, mean, rstd, static_cast<const T*>(x.data), pg,
             static_cast<const W*>(beta.data), cols, eps);
    });
  });
}
void layernorm_backward(Out dx, Out dgamma, Out dbeta, In dy, In x, const float* mean, const float* rstd, In gamma,
                        std::int64_t rows, std::int64_t cols, double* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  same_type(dx.type, dy.type, "layernorm_backward (dx, dy)");
  same_type(dx.type, x.type, "layernorm_backward (dx, x)");
  same_type(dgamma.type, dbeta.type, "layernorm_backward (dgamma, dbeta)");
  typed(dx, [&](auto* pdx) {
    using T = std::remove_pointer_t<decltype(pdx)>;
    const T* pdy = static_cast<const T*>(dy.data);
    const T* px = static_cast<const T*>(x.data);
    if constexpr (std::is_same_v<T, bf16>) {
      if (gamma.type == Type::bf16 && vec8(cols, {pdx, pdy, px, gamma.data}))
        LAUNCH(layernorm_backward_dx_vec_k, blocks_for(rows, kRowsPerBlock), pdx, pdy, px, mean, rstd,
               static_cast<const bf16*>(gamma.data), rows, cols);
      else
        typed(gamma, [&](auto* pg) { LAUNCH(layernorm_backward_dx_k, int(rows), pdx, pdy, px, mean, rstd, pg, cols); });
    } else {
      typed(gamma, [&](auto* pg) { LAUNCH(layernorm_backward_dx_k, int(rows), pdx, pdy, px, mean, rstd, pg, cols); });
    }
    const std::int64_t chunks = (rows + kColumnChunkRows - 1) / kColumnChunkRows;
    kernels::detail::require(chunks < 65536, "layernorm_backward: more than 65535 row chunks");
    const dim3 grid(unsigned(blocks_for(cols)), unsigned(chunks));
    LAUNCH(layernorm_params_partial_k, grid, scratch, scratch + chunks * cols, pdy, px, mean, rstd, rows, cols);
    typed(dgamma, [&](auto* pdg) {
      using G = std::remove_pointer_t<decltype(pdg)>;
      LAUNCH(column_finish_k, blocks_for(cols), pdg, scratch, chunks, cols);
      LAUNCH(column_finish_k, blocks_for(cols), static_cast<G*>(dbeta.data), scratch + chunks * cols, chunks, cols);
    });
  });
}
void gelu_forward(Out y, In x, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  same_type(y.type, x.type, "gelu_forward");
  if (y.type == Type::bf16 && vec8(n, {y.data, x.data})) {
    LAUNCH(gelu_forward_vec_k, blocks_for(n / 8), static_cast<bf16*>(y.data), static_cast<const bf16*>(x.data), n / 8);
    return;
  }
  typed(y, [&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    LAUNCH(gelu_forward_k, blocks_for(n), py, static_cast<const T*>(x.data), n);
  });
}
void gelu_backward(Out dx, In dy, In x, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  same_type(dx.type, dy.type, "gelu_backward (dx, dy)");
  same_type(dx.type, x.type, "gelu_backward (dx, x)");
  if (dx.type == Type::bf16 && vec8(n, {dx.data, dy.data, x.data})) {
    LAUNCH(gelu_backward_vec_k, blocks_for(n / 8), static_cast<bf16*>(dx.data), static_cast<const bf16*>(dy.data),
           static_cast<const bf16*>(x.data), n / 8);
    return;
  }
  typed(dx, [&](auto* pdx) {
    using T = std::remove_pointer_t<decltype(pdx)>;
    LAUNCH(gelu_backward_k, blocks_for(n), pdx, static_cast<const T*>(dy.data), static_cast<const T*>(x.data), n);
  });
}
void bias_gelu_from_fp32(Out y, Out pre, const float* sum, In bias, std::int64_t rows, std::int64_t cols,
                         cudaStream_t stream) {
  if (rows * cols == 0) return;
  same_type(y.type, pre.type, "bias_gelu_from_fp32");
  typed(y, [&](auto* py) {
    using T = std::remove_pointer_t<decltype(py)>;
    typed(bias, [&](auto* pb) {
      LAUNCH(bias_gelu_from_fp32_k, blocks_for(rows * cols), py, static_cast<T*>(pre.data), sum, pb, rows * cols, cols);
    });
  });
}
void dgelu_from_fp32(Out dx, const float* dy, In x, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  typed(dx, [&](auto* pdx) { typed(x, [&](auto* px) { LAUNCH(gelu_backward_k, blocks_for(n), pdx, dy, px, n); }); });
}
void causal_softmax(Out scores, std::int64_t rows, std::int64_t seq, std::int64_t keys, cudaStream_t stream) {
  if (rows > 0) typed(scores, [&](auto* p) { LAUNCH(causal_softmax_k, int(rows), p, seq, keys); });
}
void softmax_backward(Out dp, In p, std::int64_t rows, std::int64_t keys, cudaStream_t stream) {
  if (rows == 0) return;
  same_type(dp.type, p.type, "softmax_backward");
  typed(dp, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    LAUNCH(softmax_backward_k, int(rows), d, static_cast<const T*>(p.data), keys);
  });
}
void embedding_forward(Out x, In table, const std::int32_t* tokens, std::int64_t rows, std::int64_t cols,
                       std::int64_t table_rows, std::int64_t offset, cudaStream_t stream) {
  if (rows * cols == 0) return;
  same_type(x.type, table.type, "embedding_forward");
  typed(x, [&](auto* px) {
    using T = std::remove_pointer_t<decltype(px)>;
    LAUNCH(embedding_forward_k, blocks_for(rows * cols), px, static_cast<const T*>(table.data), tokens, rows, cols,
           table_rows, offset);
  });
}
void embedding_backward(float* dtable, In dx, const std::int32_t* order, const std::int32_t* first,
                        const std::int32_t* table_row, std::int64_t distinct, std::int64_t cols, cudaStream_t stream) {
  if (cols > 0 && distinct > 0)
    typed(dx, [&](auto* d) {
      kernels::detail::require(distinct <= 2147483647LL, "embedding_backward: too many distinct tokens");
      LAUNCH(embedding_backward_k, unsigned(distinct), dtable, d, order, first, table_row, cols);
    });
}
void gather_rows_weighted(Out out, In src, const std::int32_t* rows, const double* weights, std::int64_t out_rows,
                          std::int64_t cols, int k, cudaStream_t stream) {
  if (out_rows * cols > 0)
    typed(out, [&](auto* o) {
      typed(src, [&](auto* x) { LAUNCH(gather_rows_weighted_k, blocks_for(out_rows * cols), o, x, rows, weights, out_rows, cols, k); });
    });
}
void row_dots(double* dots, In a, const std::int32_t* a_rows, In b, const std::int32_t* b_rows, std::int64_t pairs,
              std::int64_t cols, cudaStream_t stream) {
  if (pairs > 0)
    typed(a, [&](auto* pa) {
      typed(b, [&](auto* pb) { LAUNCH(row_dots_k, blocks_for(pairs * 32), dots, pa, a_rows, pb, b_rows, pairs, cols); });
    });
}
void add_positions(Out x, In positions, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                   std::int64_t period, std::int64_t offset, cudaStream_t stream) {
  if (rows * cols > 0)
    typed(x, [&](auto* px) {
      typed(positions, [&](auto* pp) {
        LAUNCH(add_positions_k, blocks_for(rows * cols), px, pp, rows, cols, first_row, period, offset);
      });
    });
}
void positions_backward(Out dpositions, In dx, std::int64_t positions_rows, std::int64_t rows, std::int64_t cols,
                        std::int64_t first_row, std::int64_t period, std::int64_t offset, cudaStream_t stream) {
  if (positions_rows * cols > 0)
    typed(dpositions, [&](auto* g) {
      typed(dx, [&](auto* d) {
        LAUNCH(positions_backward_k, blocks_for(positions_rows * cols), g, d, positions_rows, rows, cols, first_row,
               period, offset);
      });
    });
}
void logits_row_max(float* row_max, In logits, std::int64_t rows, std::int64_t vocab, cudaStream_t stream) {
  if (rows > 0) typed(logits, [&](auto* l) { LAUNCH(logits_row_max_k, int(rows), row_max, l, vocab); });
}
void logits_sum_exp_and_target(float* stats, In logits, const float* row_max, const std::int32_t* targets,
                               std::int64_t rows, std::int64_t vocab, std::int64_t offset, cudaStream_t stream) {
  if (rows > 0)
    typed(logits, [&](auto* l) { LAUNCH(logits_sum_exp_k, int(rows), stats, l, row_max, targets, vocab, offset); });
}
void cross_entropy_backward(Out dlogits, In logits, const float* row_max, const float* stats,
                            const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t offset,
                            float scale, cudaStream_t stream) {
  if (rows * vocab == 0) return;
  same_type(dlogits.type, logits.type, "cross_entropy_backward");
  typed(dlogits, [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    LAUNCH(cross_entropy_backward_k, blocks_for(rows * vocab), d, static_cast<const T*>(logits.data), row_max, stats,
           targets, rows, vocab, offset, scale);
  });
}
void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float grad_scale, double c1, double c2, cudaStream_t stream) {
  if (n > 0)
    LAUNCH(adamw_k, blocks_for(n), param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2);
}

}  // namespace foresight::trainer::cuda
