// The compute backend: tensor storage and every op the GPT model and its optimizer need. The model
// and the schedule are written once against this interface; the CPU backend (cpu_backend.hpp) is
// the reference that CI runs, and the CUDA backend (cuda_backend.hpp: cuBLAS and its own
// kernels, fp32 or bf16 storage with fp32 master weights) implements the same calls. Shapes are given in comments as (rows, cols);
// N = tokens in a micro-batch. Ops that write a gradient into a parameter's gradient accumulate
// (+=) so micro-batches add up; ops that produce activations overwrite. Under a bf16 precision
// recipe (precision.hpp) every op rounds what it writes into a bf16 tensor; which tensors are bf16
// is decided where they are allocated: zeros() gives the recipe's activation type, zeros_fp32()
// fp32 whatever the recipe (master weights, main gradients, optimizer moments, statistics).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainer/precision.hpp"
#include "trainer/tensor.hpp"

namespace foresight::trainer {

/// Hyper-parameters of one AdamW update (Loshchilov & Hutter 2019, decoupled weight decay).
struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;  // 0 for biases and LayerNorm parameters
  float grad_scale = 1;    // applied to the gradient first (gradient clipping)
  int step = 1;            // 1-based, for bias correction
};

/// Shapes of one causal self-attention call on a micro-batch (or one TeraPipe slice of it).
struct AttentionShape {
  int batch = 0;     // sequences
  int seq = 0;       // queries per sequence
  int heads = 0;     // heads held by this rank
  int head_dim = 0;
  int context = 0;   // keys per sequence, earlier slices' first; 0 = seq (no earlier slices)
  /// Keys per sequence; query i sits at position keys() - seq + i and sees keys 0 .. that position.
  int keys() const { return context > 0 ? context : seq; }
};

/// Which position row n of an activation (this rank's rows of a micro-batch, or of one TeraPipe
/// slice of it) holds: offset + (first_row + n) % period. The plain case is {0, seq_len, 0}.
struct TokenPositions {
  std::int64_t first_row = 0;  // of these rows among the rows of every rank (sequence parallelism)
  std::int64_t period = 0;     // tokens per sequence in the rows (seq_len, or a slice's length)
  std::int64_t offset = 0;     // position of the first token of each sequence (a slice's start)
  std::int64_t of(std::int64_t n) const { return offset + (first_row + n) % period; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// What the arithmetic runs in ("fp32"; "tf32" when GEMMs use TF32 tensor cores; "bf16").
  virtual std::string compute_dtype() const { return "fp32"; }
  /// The precision recipe, fixed when the backend is made.
  virtual Precision precision() const { return Precision::fp32; }
  /// Where this backend's tensors live; communicators stage device tensors through the host.
  virtual Device device() const { return Device::host; }
  /// The CUDA stream every op of this backend is queued on (a cudaStream_t), so that a
  /// communicator with streams of its own (NCCL) can order them against it; nullptr for backends
  /// that compute on the host (cpu-staged included: its "device" tensors are host memory).
  virtual void* stream() const { return nullptr; }

  // --- storage ---
  /// A new (rows, cols) tensor filled with zeros, of the recipe's activation type (bf16 under bf16).
  virtual Tensor zeros(std::int64_t rows, std::int64_t cols) = 0;
  /// The same in fp32 whatever the recipe: master weights, main gradients, optimizer moments,
  /// LayerNorm and softmax statistics, gradient accumulators. (An fp32-only backend needs no other.)
  virtual Tensor zeros_fp32(std::int64_t rows, std::int64_t cols) { return zeros(rows, cols); }
  /// Copies src into dst (rounded when dst is bf16).
  virtual void copy_from_host(Tensor dst, std::span<const float> src) = 0;
  virtual void copy_to_host(std::span<float> dst, const Tensor& src) = 0;
  virtual void fill(Tensor t, float value) = 0;
  /// Bytes currently allocated by this backend, and the most ever at once.
  virtual std::int64_t bytes_in_use() const = 0;
  virtual std::int64_t peak_bytes() const = 0;

  // --- elementwise and reductions ---
  virtual void copy(Tensor dst, const Tensor& src) = 0;
  /// y += x (same shape).
  virtual void add(Tensor y, const Tensor& x) = 0;
  /// Sum of squares of every element, accumulated in double.
  virtual double sum_squares(const Tensor& x) = 0;
  /// sum_squares of each tensor, in order. A device backend queues them all and waits once (the
  /// gradient norm asks for one per parameter: 292 waits per step for a 24-layer GPT otherwise).
  virtual std::vector<double> sum_squares_many(std::span<const Tensor> xs) {
    std::vector<double> r;
    r.reserve(xs.size());
    for (const Tensor& x : xs) r.push_back(sum_squares(x));
    return r;
  }
  /// True when every element is finite.
  virtual bool all_finite(const Tensor& x) = 0;

  // --- GEMM ---
  /// c (M,N) = op(a) op(b), or c += ... when `accumulate`; op transposes when asked. Under bf16 the
  /// inputs are read rounded to bf16 and the products summed in fp32 or wider (a tensor core's
  /// accumulator); c is rounded only if it is bf16, so a weight gradient accumulates in its fp32
  /// main-grad (Megatron-LM's gradient-accumulation fusion).
  virtual void matmul(Tensor c, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      bool accumulate) = 0;
  /// c (M,N) = op(a) op(b) + bias (1,N) broadcast over rows: a Linear layer's output in one
  /// call. The bias joins the fp32 sum before c is rounded, so a bf16 c is rounded once (the
  /// rounding of cuBLASLt's BIAS epilogue, which the CUDA backend uses); matmul then add_bias
  /// rounds twice. This default is that pair, for backends with nothing to fuse.
  virtual void matmul_bias(Tensor c, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                           const Tensor& bias) {
    matmul(c, a, transpose_a, b, transpose_b, false);
    add_bias(c, bias);
  }
  /// A Linear layer and its GeLU in one call: pre (M,N) = op(a) op(b) + bias, as matmul_bias
  /// stores it, and y (M,N) = GeLU of that sum as a float, before pre's rounding. So under bf16
  /// y is rounded once, from the unrounded pre-activation (cuBLASLt's GELU_AUX_BIAS epilogue,
  /// which the CUDA backend uses; pre is its aux output). Under fp32 it is matmul_bias then
  /// gelu_forward exactly. This default is that pair, for backends with nothing to fuse.
  virtual void matmul_bias_gelu(Tensor y, Tensor pre, const Tensor& a, bool transpose_a, const Tensor& b,
                                bool transpose_b, const Tensor& bias) {
    matmul_bias(pre, a, transpose_a, b, transpose_b, bias);
    gelu_forward(y, pre);
  }
  /// GeLU's backward through the GEMM that feeds it: dx (M,N) = (op(a) op(b)) * GeLU'(pre), the
  /// product taken from the GEMM's float sum, rounded once (cuBLASLt's DGELU epilogue with pre as
  /// its aux input). Under fp32 it is matmul then gelu_backward exactly, and so is this default,
  /// in place in dx (no (M,N) temporary: the host memory mirror counts none).
  virtual void matmul_dgelu(Tensor dx, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                            const Tensor& pre) {
    matmul(dx, a, transpose_a, b, transpose_b, false);
    gelu_backward(dx, dx, pre);
  }
  /// y (N,C) += bias (1,C) broadcast over rows.
  virtual void add_bias(Tensor y, const Tensor& bias) = 0;
  /// dbias (1,C) += column sums of dy (N,C).
  virtual void bias_backward(Tensor dbias, const Tensor& dy) = 0;

  // --- layers ---
  /// y (N,C) = LayerNorm(x) * gamma + beta; saves mean and rstd (N,1) for the backward.
  virtual void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& gamma,
                                 const Tensor& beta) = 0;
  /// dx (N,C) = d/dx (overwrite); dgamma, dbeta (1,C) accumulate.
  virtual void layernorm_backward(Tensor dx, Tensor dgamma, Tensor dbeta, const Tensor& dy, const Tensor& x,
                                  const Tensor& mean, const Tensor& rstd, const Tensor& gamma) = 0;
  /// y = GeLU(x), tanh approximation (GPT-2, Hendrycks & Gimpel 2016).
  virtual void gelu_forward(Tensor y, const Tensor& x) = 0;
  /// dx = dy * GeLU'(x) (overwrite), element by element: dx may be dy.
  virtual void gelu_backward(Tensor dx, const Tensor& dy, const Tensor& x) = 0;
  /// Causal multi-head attention. qkv (N, 3*H*D) laid out [q heads | k heads | v heads], of which
  /// the queries are read; kv (batch*keys, 3*H*D), same layout, of which the keys and values are
  /// read (kv = qkv without TeraPipe slices; else the cached K/V of earlier slices, then this
  /// slice's). out (N, H*D); probs: what the backward needs, shaped as attention_saved() says:
  /// (batch*H*seq, keys) softmax(q k^T / sqrt(D)) of the activation type (the unfused path), or
  /// (batch*H*seq, 1) fp32 log-sum-exp per query (a fused, FlashAttention-style path).
  virtual void attention_forward(Tensor out, Tensor probs, const Tensor& qkv, const Tensor& kv,
                                 const AttentionShape& s) = 0;
  /// The tensor attention_forward saves for the backward: rows, columns, and whether it is fp32
  /// (zeros_fp32) rather than of the activation type (zeros). Default: the probabilities.
  struct AttentionSaved {
    std::int64_t rows = 0, cols = 0;
    bool fp32 = false;
  };
  virtual AttentionSaved attention_saved(const AttentionShape& s) const {
    return {std::int64_t(s.batch) * s.heads * s.seq, s.keys(), false};
  }
  /// From dout (N, H*D), the forward's out and saved probs, qkv and kv: the query columns of dqkv
  /// (N, 3*H*D) are overwritten with dL/dq; dL/dk and dL/dv are added into the key and value
  /// columns of dkv (batch*keys, 3*H*D). dkv may be dqkv itself (zeroed by the caller) when kv is
  /// qkv. `out` is read by fused paths (rowsum(dout * out)); the unfused one ignores it.
  virtual void attention_backward(Tensor dqkv, Tensor dkv, const Tensor& dout, const Tensor& out, const Tensor& probs,
                                  const Tensor& qkv, const Tensor& kv, const AttentionShape& s) = 0;

  // --- embeddings (vocabulary split over tensor-parallel ranks: this rank holds rows
  //     [vocab_offset, vocab_offset + table.rows())) ---
  /// x (N,C) = table[token - vocab_offset] for tokens in this rank's range, 0 elsewhere.
  virtual void embedding_forward(Tensor x, const Tensor& table, std::span<const std::int32_t> tokens,
                                 std::int64_t vocab_offset) = 0;
  /// dtable[token - vocab_offset] += dx rows, in token order (deterministic).
  virtual void embedding_backward(Tensor dtable, const Tensor& dx, std::span<const std::int32_t> tokens,
                                  std::int64_t vocab_offset) = 0;
  /// out (R,C) row r = sum over j < k of weights[r*k + j] * src row rows[r*k + j], an entry with a
  /// negative row skipped (a row with none is 0): summed in double in j order, rounded once. The
  /// MoE combine (k = top-k, the gates as weights), its backward's scatter of gate * dy into the
  /// expert slots (k = 1, one source per slot) and the input gradient's return to the tokens
  /// (weights 1) are this one gather, on the device, with no host round trip.
  virtual void gather_rows_weighted(Tensor out, const Tensor& src, std::span<const std::int32_t> rows,
                                    std::span<const double> weights, int k) = 0;
  /// dots[i] = sum over c of a[a_rows[i], c] * b[b_rows[i], c], in double in column order; 0 for a
  /// pair with a negative row. The MoE gates' gradients (dy . expert output), returned to the host.
  virtual std::vector<double> row_dots(const Tensor& a, std::span<const std::int32_t> a_rows, const Tensor& b,
                                       std::span<const std::int32_t> b_rows) = 0;
  /// x (N,C) += positions (seq,C) row p.of(n).
  virtual void add_positions(Tensor x, const Tensor& positions, const TokenPositions& p) = 0;
  /// dpositions (seq,C) += dx rows folded by position p.of(n).
  virtual void positions_backward(Tensor dpositions, const Tensor& dx, const TokenPositions& p) = 0;

  // --- vocabulary-parallel softmax cross-entropy (Megatron-LM), in three local passes around
  //     the tensor-parallel all-reduces ---
  /// row_max (N,1) = max over this rank's logits (N,V_local).
  virtual void logits_row_max(Tensor row_max, const Tensor& logits) = 0;
  /// stats (N,2): column 0 = sum exp(logit - row_max), column 1 = the target's logit when the
  /// target lies in this rank's range (else 0).
  virtual void logits_sum_exp_and_target(Tensor stats, const Tensor& logits, const Tensor& row_max,
                                         std::span<const std::int32_t> targets, std::int64_t vocab_offset) = 0;
  /// Sum over rows of (log(sum_exp) + row_max - target_logit), in double: the summed token loss.
  virtual double cross_entropy_loss_sum(const Tensor& row_max, const Tensor& stats) = 0;
  /// dlogits (N,V_local) = scale * (softmax - onehot(target)) (overwrite).
  virtual void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& row_max,
                                      const Tensor& stats, std::span<const std::int32_t> targets,
                                      std::int64_t vocab_offset, float scale) = 0;

  // --- optimizer ---
  /// One AdamW update of param from grad with moments m, v (all the same shape).
  virtual void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWStep& h) = 0;
};

/// LayerNorm's variance epsilon, one value for every backend so that they compute the same model.
inline constexpr double kLayerNormEps = 1e-5;

/// Fails (FORESIGHT_CHECK) unless a and b have the same (rows, cols); `op` names the caller.
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
/// Fails unless gather_rows_weighted's arguments agree: rows and weights hold out.rows() * k entries,
/// k >= 1, out and src have as many columns, and every row index is below src.rows().
void check_gather_rows(const Tensor& out, const Tensor& src, std::span<const std::int32_t> rows,
                       std::span<const double> weights, int k);
/// Fails unless row_dots' arguments agree (as many a_rows as b_rows, equal columns, indices in range).
void check_row_dots(const Tensor& a, std::span<const std::int32_t> a_rows, const Tensor& b,
                    std::span<const std::int32_t> b_rows);

/// The backends this build offers, by name: "cpu"; with CUDA, "cuda" (fp32 GEMMs) and "cuda-tf32";
/// each runs either recipe. Throws SpecError naming --backend for a name this build lacks (or a
/// cuda backend without a visible GPU).
std::unique_ptr<Backend> make_backend(const std::string& name, Precision precision = Precision::fp32);

}  // namespace foresight::trainer
