// Launchers of the CUDA backend's kernels (cuda_backend_kernels.cu), each the device twin of one
// CpuBackend loop, with reductions in double so that the two backends agree to rounding. Every
// tensor argument says how its elements are stored (fp32, or packed bf16 under --precision bf16):
// the kernels are templates over the storage type of their inputs and outputs, read every element
// as a float, compute in fp32 or double, and round what they write into a bf16 tensor to nearest
// even (__float2bfloat16_rn of the float the CPU would store, as kernels/bf16.hpp does on the
// host). Plain pointers and sizes only, so that cuda_backend.cpp stays ordinary C++. Every
// launcher enqueues on `stream` and reports a bad launch by throwing (kernels::CudaError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace foresight::trainer::cuda {

/// How a device tensor's elements are stored.
enum class Type { fp32, bf16 };

/// A tensor's elements that a kernel reads: the first one's address and their storage.
struct In {
  const void* data = nullptr;
  Type type = Type::fp32;
};
/// A tensor's elements that a kernel writes (or updates in place).
struct Out {
  void* data = nullptr;
  Type type = Type::fp32;
  operator In() const { return In{data, type}; }
};

void fill(Out p, std::int64_t n, float value, cudaStream_t stream);
/// dst = src, converting between storage types (rounding when dst is bf16, exact otherwise).
void convert(Out dst, In src, std::int64_t n, cudaStream_t stream);
/// y += x, summed in float and rounded when y is bf16 (the CPU's float add, then round_if_bf16).
void add(Out y, In x, std::int64_t n, cudaStream_t stream);
/// *result = sum of x[i]^2 in double, via `scratch` (kSumBlocks doubles), deterministic order.
inline constexpr int kSumBlocks = 256;
void sum_squares(In x, std::int64_t n, double* scratch, double* result, cudaStream_t stream);
/// *flag = 1 when some element is not finite (the caller zeroes it first).
void any_non_finite(In x, std::int64_t n, int* flag, cudaStream_t stream);

/// y (rows, cols) += bias (cols) per row.
void add_bias(Out y, In bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
/// Column gradients (bias, LayerNorm's gamma and beta) sum kColumnChunkRows-row chunks in double
/// in parallel, then each column's chunks in order: deterministic. Their scratch holds
/// column_scratch_doubles(rows, cols) doubles (twice that for layernorm_backward).
inline constexpr std::int64_t kColumnChunkRows = 64;
std::int64_t column_scratch_doubles(std::int64_t rows, std::int64_t cols);
/// dbias (cols) += column sums of dy (rows, cols), in double (chunks of rows, then the chunks).
void bias_backward(Out dbias, In dy, std::int64_t rows, std::int64_t cols, double* scratch, cudaStream_t stream);

/// y, x of one type; gamma, beta of one type; mean and rstd fp32 (LayerNorm statistics).
void layernorm_forward(Out y, float* mean, float* rstd, In x, In gamma, In beta, std::int64_t rows, std::int64_t cols,
                       double eps, cudaStream_t stream);
/// dx, dy, x of one type; dgamma, dbeta of one type (accumulated); mean, rstd fp32.
void layernorm_backward(Out dx, Out dgamma, Out dbeta, In dy, In x, const float* mean, const float* rstd, In gamma,
                        std::int64_t rows, std::int64_t cols, double* scratch, cudaStream_t stream);
void gelu_forward(Out y, In x, std::int64_t n, cudaStream_t stream);
/// dx, dy, x of one type.
void gelu_backward(Out dx, In dy, In x, std::int64_t n, cudaStream_t stream);

/// matmul_bias_gelu's epilogue without cuBLASLt: p = sum (fp32, rows x cols) + bias (cols), in
/// float; pre = p and y = GeLU(p), each rounded once when bf16 (y and pre of one type).
void bias_gelu_from_fp32(Out y, Out pre, const float* sum, In bias, std::int64_t rows, std::int64_t cols,
                         cudaStream_t stream);
/// matmul_dgelu's: dx = dy (fp32) * GeLU'(x), rounded once when bf16.
void dgelu_from_fp32(Out dx, const float* dy, In x, std::int64_t n, cudaStream_t stream);

/// Rows of `scores` (rows = batch*heads*seq, keys columns; row r is query r % seq): causal mask
/// (query i sees keys 0 .. keys - seq + i) and softmax in place; masked entries become 0.
void causal_softmax(Out scores, std::int64_t rows, std::int64_t seq, std::int64_t keys, cudaStream_t stream);
/// ds = p * (dp - sum_j p_j dp_j), in place over dp (rows, keys); dp and p of one type. The
/// scores' 1/sqrt(D) is the caller's (the alpha of the GEMMs that read ds).
void softmax_backward(Out dp, In p, std::int64_t rows, std::int64_t keys, cudaStream_t stream);

/// x (rows, cols) = table[tokens[n] - offset] or 0 outside [0, table_rows); x and table of one type.
void embedding_forward(Out x, In table, const std::int32_t* tokens, std::int64_t rows, std::int64_t cols,
                       std::int64_t table_rows, std::int64_t offset, cudaStream_t stream);
/// dtable[table_row[u]] += dx rows order[first[u]] .. order[first[u + 1] - 1] for each of the
/// `distinct` tokens u (the caller groups the rows by token on the host, ascending within a
/// token): one block per token, float additions in row order, the CPU's (deterministic). dtable
/// fp32 (a bf16 table goes through an fp32 copy).
void embedding_backward(float* dtable, In dx, const std::int32_t* order, const std::int32_t* first,
                        const std::int32_t* table_row, std::int64_t distinct, std::int64_t cols, cudaStream_t stream);
/// out (out_rows, cols) row r = sum over j < k of weights[r*k+j] * src row rows[r*k+j] (negative rows
/// skipped), in double with the CPU's roundings (no fused multiply-add), rounded once.
void gather_rows_weighted(Out out, In src, const std::int32_t* rows, const double* weights, std::int64_t out_rows,
                          std::int64_t cols, int k, cudaStream_t stream);
/// dots[i] = a row a_rows[i] . b row b_rows[i] in double (0 when either is negative); a warp per pair.
void row_dots(double* dots, In a, const std::int32_t* a_rows, In b, const std::int32_t* b_rows, std::int64_t pairs,
              std::int64_t cols, cudaStream_t stream);
/// x row n += positions row offset + (first_row + n) % period.
void add_positions(Out x, In positions, std::int64_t rows, std::int64_t cols, std::int64_t first_row,
                   std::int64_t period, std::int64_t offset, cudaStream_t stream);
/// dpositions row r += sum over rows n at position r of dx row n, in row order, in double.
void positions_backward(Out dpositions, In dx, std::int64_t positions_rows, std::int64_t rows, std::int64_t cols,
                        std::int64_t first_row, std::int64_t period, std::int64_t offset, cudaStream_t stream);

/// Statistics (row_max, stats) fp32; logits and dlogits of the activation type.
void logits_row_max(float* row_max, In logits, std::int64_t rows, std::int64_t vocab, cudaStream_t stream);
void logits_sum_exp_and_target(float* stats, In logits, const float* row_max, const std::int32_t* targets,
                               std::int64_t rows, std::int64_t vocab, std::int64_t offset, cudaStream_t stream);
void cross_entropy_backward(Out dlogits, In logits, const float* row_max, const float* stats,
                            const std::int32_t* targets, std::int64_t rows, std::int64_t vocab, std::int64_t offset,
                            float scale, cudaStream_t stream);

/// fp32 master weights, main gradients and moments under every recipe.
void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float grad_scale, double c1, double c2, cudaStream_t stream);

}  // namespace foresight::trainer::cuda
