// Launchers of the CUDA backend's kernels (cuda_backend_kernels.cu): fp32 storage, each one the
// device twin of one CpuBackend loop, with reductions in double so that the two backends agree to
// fp32 rounding. Plain pointers and sizes only, so that cuda_backend.cpp stays ordinary C++.
// Every launcher enqueues on `stream` and reports a bad launch by throwing (kernels::CudaError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace foresight::trainer::cuda {

void fill(float* p, std::int64_t n, float value, cudaStream_t stream);
/// y += x.
void add(float* y, const float* x, std::int64_t n, cudaStream_t stream);
/// partials[0] = sum of x[i]^2 in double, via `scratch` (kSumBlocks doubles), deterministic order.
inline constexpr int kSumBlocks = 256;
void sum_squares(const float* x, std::int64_t n, double* scratch, double* result, cudaStream_t stream);
/// *flag = 1 when some element is not finite (the caller zeroes it first).
void any_non_finite(const float* x, std::int64_t n, int* flag, cudaStream_t stream);

/// y (rows, cols) += bias (cols) per row.
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
/// dbias (cols) += column sums of dy (rows, cols), each column summed in row order in double.
void bias_backward(float* dbias, const float* dy, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                       std::int64_t rows, std::int64_t cols, double eps, cudaStream_t stream);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* gamma, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream);
void gelu_forward(float* y, const float* x, std::int64_t n, cudaStream_t stream);
void gelu_backward(float* dx, const float* dy, const float* x, std::int64_t n, cudaStream_t stream);

/// Rows of `scores` (rows = batch*heads*seq, keys columns; row r is query r % seq): causal mask
/// (query i sees keys 0 .. keys - seq + i) and softmax in place; masked entries become 0.
void causal_softmax(float* scores, std::int64_t rows, std::int64_t seq, std::int64_t keys, cudaStream_t stream);
/// ds = p * (dp - sum_j p_j dp_j) * scale, in place over dp (rows, keys).
void softmax_backward(float* dp, const float* p, std::int64_t rows, std::int64_t keys, float scale,
                      cudaStream_t stream);

/// x (rows, cols) = table[tokens[n] - offset] or 0 outside [0, table_rows).
void embedding_forward(float* x, const float* table, const std::int32_t* tokens, std::int64_t rows, std::int64_t cols,
                       std::int64_t table_rows, std::int64_t offset, cudaStream_t stream);
/// dtable[tokens[n] - offset] += dx row n, rows in order (one thread per column: deterministic).
void embedding_backward(float* dtable, const float* dx, const std::int32_t* tokens, std::int64_t rows,
                        std::int64_t cols, std::int64_t table_rows, std::int64_t offset, cudaStream_t stream);
/// x row n += positions row offset + (first_row + n) % period.
void add_positions(float* x, const float* positions, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                   std::int64_t period, std::int64_t offset, cudaStream_t stream);
/// dpositions row r += sum over rows n at position r of dx row n, in row order, in double.
void positions_backward(float* dpositions, const float* dx, std::int64_t positions_rows, std::int64_t rows,
                        std::int64_t cols, std::int64_t first_row, std::int64_t period, std::int64_t offset,
                        cudaStream_t stream);

void logits_row_max(float* row_max, const float* logits, std::int64_t rows, std::int64_t vocab, cudaStream_t stream);
void logits_sum_exp_and_target(float* stats, const float* logits, const float* row_max, const std::int32_t* targets,
                               std::int64_t rows, std::int64_t vocab, std::int64_t offset, cudaStream_t stream);
void cross_entropy_backward(float* dlogits, const float* logits, const float* row_max, const float* stats,
                            const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t offset,
                            float scale, cudaStream_t stream);

void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float grad_scale, double c1, double c2, cudaStream_t stream);

}  // namespace foresight::trainer::cuda
