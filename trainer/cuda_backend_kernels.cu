// Kernels of the trainer's CUDA backend: one per CpuBackend loop, written for agreement with it
// rather than speed (reductions in double, fixed summation orders where the CPU's order is part of
// its contract, e.g. embedding gradients accumulated token by token). GEMMs and attention's
// batched products go to cuBLAS in cuda_backend.cpp; these are the memory-bound rest.
#include "trainer/cuda_backend_kernels.hpp"

#include <cmath>
#include <cfloat>

#include "kernels/cuda_check.hpp"

namespace foresight::trainer::cuda {

namespace {

constexpr int kThreads = 256;

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

__global__ void fill_k(float* p, std::int64_t n, float v) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

__global__ void add_k(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void sum_squares_partial_k(const float* x, std::int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double s = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * x[i];
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

__global__ void non_finite_k(const float* x, std::int64_t n, int* flag) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    if (!isfinite(x[i])) *flag = 1;
}

__global__ void add_bias_k(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

__global__ void bias_backward_k(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  double s = 0;
  for (std::int64_t n = 0; n < rows; ++n) s += dy[n * cols + j];
  dbias[j] = float(dbias[j] + s);
}

__global__ void layernorm_forward_k(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                                    const float* beta, std::int64_t cols, double eps) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const float* xr = x + n * cols;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
  const double mu = block_sum(s, sh) / double(cols);
  double v = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
  const double var = block_sum(v, sh) / double(cols);
  const double rs = 1.0 / sqrt(var + eps);
  if (threadIdx.x == 0) {
    mean[n] = float(mu);
    rstd[n] = float(rs);
  }
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    y[n * cols + j] = float((xr[j] - mu) * rs * gamma[j] + beta[j]);
}

__global__ void layernorm_backward_dx_k(float* dx, const float* dy, const float* x, const float* mean,
                                        const float* rstd, const float* gamma, std::int64_t cols) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const float* xr = x + n * cols;
  const float* dyr = dy + n * cols;
  const double mu = mean[n], rs = rstd[n];
  double a = 0, b = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (xr[j] - mu) * rs;
    const double dxhat = double(dyr[j]) * gamma[j];
    a += dxhat;
    b += dxhat * xhat;
  }
  const double mean_dxhat = block_sum(a, sh) / double(cols);
  const double mean_dxhat_xhat = block_sum(b, sh) / double(cols);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (xr[j] - mu) * rs;
    const double dxhat = double(dyr[j]) * gamma[j];
    dx[n * cols + j] = float(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

__global__ void layernorm_backward_params_k(float* dgamma, float* dbeta, const float* dy, const float* x,
                                            const float* mean, const float* rstd, std::int64_t rows,
                                            std::int64_t cols) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  double dg = 0, db = 0;
  for (std::int64_t n = 0; n < rows; ++n) {
    const double xhat = (x[n * cols + j] - double(mean[n])) * double(rstd[n]);
    dg += double(dy[n * cols + j]) * xhat;
    db += dy[n * cols + j];
  }
  dgamma[j] = float(dgamma[j] + dg);
  dbeta[j] = float(dbeta[j] + db);
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;

__global__ void gelu_forward_k(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    y[i] = float(0.5 * v * (1.0 + tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))));
  }
}

__global__ void gelu_backward_k(float* dx, const float* dy, const float* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    const double t = tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v));
    const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * v * v);
    dx[i] = float(dy[i] * d);
  }
}

__global__ void causal_softmax_k(float* scores, std::int64_t seq, std::int64_t keys) {
  __shared__ double sh[kThreads];
  __shared__ float shf[kThreads];
  const std::int64_t r = blockIdx.x;
  const std::int64_t last = keys - seq + r % seq;  // the query sees keys 0 .. last
  float* row = scores + r * keys;
  float mx = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, shf);
  double s = 0;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) s += exp(double(row[j]) - mx);
  s = block_sum(s, sh);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x)
    row[j] = j <= last ? float(exp(double(row[j]) - mx) / s) : 0.0f;
}

__global__ void softmax_backward_k(float* dp, const float* p, std::int64_t keys, float scale) {
  __shared__ double sh[kThreads];
  const std::int64_t r = blockIdx.x;
  float* d = dp + r * keys;
  const float* pr = p + r * keys;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) s += double(pr[j]) * d[j];
  s = block_sum(s, sh);
  for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) d[j] = float(double(pr[j]) * (d[j] - s) * scale);
}

__global__ void embedding_forward_k(float* x, const float* table, const std::int32_t* tokens, std::int64_t rows,
                                    std::int64_t cols, std::int64_t table_rows, std::int64_t offset) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / cols, j = i % cols;
    const std::int64_t r = std::int64_t(tokens[n]) - offset;
    x[i] = (r >= 0 && r < table_rows) ? table[r * cols + j] : 0.0f;
  }
}

__global__ void embedding_backward_k(float* dtable, const float* dx, const std::int32_t* tokens, std::int64_t rows,
                                     std::int64_t cols, std::int64_t table_rows, std::int64_t offset) {
  const std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::int64_t r = std::int64_t(tokens[n]) - offset;
    if (r >= 0 && r < table_rows) dtable[r * cols + j] += dx[n * cols + j];
  }
}

__global__ void add_positions_k(float* x, const float* positions, std::int64_t rows, std::int64_t cols,
                                std::int64_t first_row, std::int64_t period, std::int64_t offset) {
  const std::int64_t total = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / cols, j = i % cols;
    x[i] += positions[(offset + (first_row + n) % period) * cols + j];
  }
}

__global__ void positions_backward_k(float* dpositions, const float* dx, std::int64_t positions_rows, std::int64_t rows,
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
      for (std::int64_t n = n0; n < rows; n += period) acc += dx[n * cols + j];
    }
    dpositions[i] = float(dpositions[i] + acc);
  }
}

__global__ void logits_row_max_k(float* row_max, const float* logits, std::int64_t vocab) {
  __shared__ float sh[kThreads];
  const std::int64_t n = blockIdx.x;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, logits[n * vocab + j]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) row_max[n] = m;
}

__global__ void logits_sum_exp_k(float* stats, const float* logits, const float* row_max, const std::int32_t* targets,
                                 std::int64_t vocab, std::int64_t offset) {
  __shared__ double sh[kThreads];
  const std::int64_t n = blockIdx.x;
  const float* l = logits + n * vocab;
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += exp(double(l[j]) - row_max[n]);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    const std::int64_t t = std::int64_t(targets[n]) - offset;
    stats[2 * n] = float(s);
    stats[2 * n + 1] = (t >= 0 && t < vocab) ? l[t] : 0.0f;
  }
}

__global__ void cross_entropy_backward_k(float* dlogits, const float* logits, const float* row_max, const float* stats,
                                         const std::int32_t* targets, std::int64_t rows, std::int64_t vocab,
                                         std::int64_t offset, float scale) {
  const std::int64_t total = rows * vocab;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / vocab, j = i % vocab;
    const double p = exp(double(logits[i]) - row_max[n]) / double(stats[2 * n]);
    const std::int64_t t = std::int64_t(targets[n]) - offset;
    dlogits[i] = float(scale * (p - (j == t ? 1.0 : 0.0)));
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

}  // namespace

#define LAUNCH(kernel, grid, ...)                                 \
  do {                                                            \
    kernel<<<(grid), kThreads, 0, stream>>>(__VA_ARGS__);         \
    FORESIGHT_CUDA_LAUNCHED(#kernel);                             \
  } while (0)

void fill(float* p, std::int64_t n, float value, cudaStream_t stream) {
  if (n > 0) LAUNCH(fill_k, blocks_for(n), p, n, value);
}
void add(float* y, const float* x, std::int64_t n, cudaStream_t stream) {
  if (n > 0) LAUNCH(add_k, blocks_for(n), y, x, n);
}
void sum_squares(const float* x, std::int64_t n, double* scratch, double* result, cudaStream_t stream) {
  LAUNCH(sum_squares_partial_k, kSumBlocks, x, n, scratch);
  LAUNCH(sum_partials_k, 1, scratch, kSumBlocks, result);
}
void any_non_finite(const float* x, std::int64_t n, int* flag, cudaStream_t stream) {
  if (n > 0) LAUNCH(non_finite_k, blocks_for(n), x, n, flag);
}
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols > 0) LAUNCH(add_bias_k, blocks_for(rows * cols), y, bias, rows, cols);
}
void bias_backward(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols > 0) LAUNCH(bias_backward_k, blocks_for(cols), dbias, dy, rows, cols);
}
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                       std::int64_t rows, std::int64_t cols, double eps, cudaStream_t stream) {
  if (rows > 0) LAUNCH(layernorm_forward_k, int(rows), y, mean, rstd, x, gamma, beta, cols, eps);
}
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* gamma, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream) {
  if (rows == 0) return;
  LAUNCH(layernorm_backward_dx_k, int(rows), dx, dy, x, mean, rstd, gamma, cols);
  LAUNCH(layernorm_backward_params_k, blocks_for(cols), dgamma, dbeta, dy, x, mean, rstd, rows, cols);
}
void gelu_forward(float* y, const float* x, std::int64_t n, cudaStream_t stream) {
  if (n > 0) LAUNCH(gelu_forward_k, blocks_for(n), y, x, n);
}
void gelu_backward(float* dx, const float* dy, const float* x, std::int64_t n, cudaStream_t stream) {
  if (n > 0) LAUNCH(gelu_backward_k, blocks_for(n), dx, dy, x, n);
}
void causal_softmax(float* scores, std::int64_t rows, std::int64_t seq, std::int64_t keys, cudaStream_t stream) {
  if (rows > 0) LAUNCH(causal_softmax_k, int(rows), scores, seq, keys);
}
void softmax_backward(float* dp, const float* p, std::int64_t rows, std::int64_t keys, float scale,
                      cudaStream_t stream) {
  if (rows > 0) LAUNCH(softmax_backward_k, int(rows), dp, p, keys, scale);
}
void embedding_forward(float* x, const float* table, const std::int32_t* tokens, std::int64_t rows, std::int64_t cols,
                       std::int64_t table_rows, std::int64_t offset, cudaStream_t stream) {
  if (rows * cols > 0) LAUNCH(embedding_forward_k, blocks_for(rows * cols), x, table, tokens, rows, cols, table_rows, offset);
}
void embedding_backward(float* dtable, const float* dx, const std::int32_t* tokens, std::int64_t rows,
                        std::int64_t cols, std::int64_t table_rows, std::int64_t offset, cudaStream_t stream) {
  if (cols > 0) LAUNCH(embedding_backward_k, blocks_for(cols), dtable, dx, tokens, rows, cols, table_rows, offset);
}
void add_positions(float* x, const float* positions, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                   std::int64_t period, std::int64_t offset, cudaStream_t stream) {
  if (rows * cols > 0) LAUNCH(add_positions_k, blocks_for(rows * cols), x, positions, rows, cols, first_row, period, offset);
}
void positions_backward(float* dpositions, const float* dx, std::int64_t positions_rows, std::int64_t rows,
                        std::int64_t cols, std::int64_t first_row, std::int64_t period, std::int64_t offset,
                        cudaStream_t stream) {
  if (positions_rows * cols > 0)
    LAUNCH(positions_backward_k, blocks_for(positions_rows * cols), dpositions, dx, positions_rows, rows, cols, first_row,
           period, offset);
}
void logits_row_max(float* row_max, const float* logits, std::int64_t rows, std::int64_t vocab, cudaStream_t stream) {
  if (rows > 0) LAUNCH(logits_row_max_k, int(rows), row_max, logits, vocab);
}
void logits_sum_exp_and_target(float* stats, const float* logits, const float* row_max, const std::int32_t* targets,
                               std::int64_t rows, std::int64_t vocab, std::int64_t offset, cudaStream_t stream) {
  if (rows > 0) LAUNCH(logits_sum_exp_k, int(rows), stats, logits, row_max, targets, vocab, offset);
}
void cross_entropy_backward(float* dlogits, const float* logits, const float* row_max, const float* stats,
                            const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t offset,
                            float scale, cudaStream_t stream) {
  if (rows * vocab > 0)
    LAUNCH(cross_entropy_backward_k, blocks_for(rows * vocab), dlogits, logits, row_max, stats, targets, rows, vocab,
           offset, scale);
}
void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float grad_scale, double c1, double c2, cudaStream_t stream) {
  if (n > 0)
    LAUNCH(adamw_k, blocks_for(n), param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, c1, c2);
}

}  // namespace foresight::trainer::cuda
