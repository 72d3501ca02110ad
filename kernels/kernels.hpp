// Launchers of the trainer's CUDA kernels (foresight_kernels, built only with a CUDA toolkit).
// Plain C++: device pointers, sizes, an explicit stream; usable from .cpp files. Each launcher has a
// CPU twin of the same name in kernels/reference.hpp (ground truth, same layouts, same "+="
// conventions) and a tolerance test in tests/gpu/. All tensors are row-major; shapes are in the
// comments as (rows, cols). bf16 is kernels::bf16 (layout of __nv_bfloat16); math is fp32.
// Launchers are asynchronous on `stream`, check their launch (CudaError naming the call) and
// validate sizes (std::invalid_argument). Left out: fp8, vocab-parallel cross-entropy, dropout,
// variable-sized expert groups (experts are padded to a common capacity), attention head dims
// other than 32, 64 and 128.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "kernels/bf16.hpp"
#include "kernels/reference.hpp"  // GemmDims, Epilogue, AdamWConfig

namespace foresight::kernels {

/// A failed CUDA, cuBLAS or NCCL call: the message names the call, the file:line and the status.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------------
// GEMM (cuBLASLt)

/// cuBLASLt handle, a workspace on the current device and a cache of chosen algorithms. One per
/// device and per stream that runs GEMMs concurrently (the workspace is shared by its calls).
class BlasContext {
 public:
  explicit BlasContext(std::size_t workspace_bytes = std::size_t(32) << 20);
  /// With a workspace the caller owns (and keeps alive, and frees): the trainer passes scratch
  /// from its own pool, so that the memory comes from the allocator it already holds.
  BlasContext(void* workspace, std::size_t workspace_bytes);
  ~BlasContext();
  BlasContext(const BlasContext&) = delete;
  BlasContext& operator=(const BlasContext&) = delete;

  void* handle() const { return handle_; }  // cublasLtHandle_t
  void* workspace() const { return workspace_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  /// Algorithms found by the cuBLASLt heuristic, keyed by problem; opaque cublasLtMatmulAlgo_t bytes.
  std::map<std::string, std::string>& algo_cache() { return algos_; }

 private:
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  bool owns_workspace_ = true;
  std::map<std::string, std::string> algos_;
};

/// C (batch, m, n) = alpha op(A) op(B) + beta C with bf16 A, B, C and fp32 accumulation; or with an
/// epilogue gelu?(alpha op(A) op(B) + bias (n)) (cuBLASLt's fused BIAS / GELU / GELU_BIAS, GeLU in
/// its tanh form). beta != 0 only with Epilogue::none; an epilogue only with batch == 1.
/// A Linear layer y = x W^T + b with x (tokens, in), W (out, in): m = tokens, n = out, k = in,
/// trans_b = true. Its grads: dx = dy W (m = tokens, n = in, k = out); dW = dy^T x (trans_a,
/// m = out, n = in, k = tokens), accumulated with beta = 1 into an fp32 dW by the fp32 overload.
void gemm(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream);
/// The same with an fp32 C (and fp32 bias): weight gradients, router logits.
void gemm(BlasContext& ctx, const bf16* A, const bf16* B, float* C, const float* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream);
/// Every gemm asks cuBLASLt's heuristic for an algorithm that holds for the pointers' real
/// alignments (a view's rows start anywhere; the heuristic otherwise assumes 256 bytes) and whose
/// split-K partial sums, if any, stay in fp32 (a bf16 C is rounded once, from the whole fp32 sum).
/// gemm throws when there is none; try_gemm returns false instead (also for a bias that is not
/// 16-byte aligned, which cuBLASLt's epilogues mishandle), so that a caller can fall back. The
/// answer, either way, is cached per problem and alignment.
bool try_gemm(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, const GemmDims& dims,
              Epilogue epilogue, float alpha, float beta, cudaStream_t stream);
bool try_gemm(BlasContext& ctx, const bf16* A, const bf16* B, float* C, const float* bias, const GemmDims& dims,
              Epilogue epilogue, float alpha, float beta, cudaStream_t stream);
/// The epilogues with a GeLU aux matrix (bf16, C's shape and leading dimension): bias_gelu_aux
/// writes C = gelu(op(A) op(B) + bias) and aux = op(A) op(B) + bias (a Linear layer and its
/// activation, keeping the pre-activation for the backward); dgelu reads aux and writes
/// C = op(A) op(B) * gelu'(aux) (that activation's backward through the next layer's GEMM).
/// cuBLASLt's GeLU is the tanh form, as this project's: PyTorch decomposes its CUDA
/// _addmm_activation(use_gelu=True), which runs this epilogue, as gelu(approximate="tanh")
/// (torch/_decomp/decompositions.py).
/// False when cuBLASLt has no algorithm, or the bias or aux is not 16-byte aligned or ldc not a
/// multiple of 8.
bool try_gemm_aux(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, bf16* aux,
                  const GemmDims& dims, Epilogue epilogue, cudaStream_t stream);
/// Grouped expert GEMM: `experts` products of equal shape over (experts, capacity, in) inputs and
/// (experts, out, in) weights (trans_b), out (experts, capacity, out). Capacity padding makes the
/// groups equal, so this is one strided-batched cuBLASLt call.
void expert_gemm(BlasContext& ctx, const bf16* x, const bf16* w, bf16* out, int experts, int capacity, int in, int out_dim,
                 cudaStream_t stream);

/// db (n) += column sums of dy (m, n): a Linear layer's bias gradient.
void bias_grad(const bf16* dy, float* db, int m, int n, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Elementwise (vectorised 16-byte loads when the pointers allow)

void gelu_forward(const bf16* x, bf16* y, long n, cudaStream_t stream);
/// dx = dy * gelu'(x). dx may alias dy.
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, long n, cudaStream_t stream);
/// out = a + b; out may alias a or b.
void residual_add(const bf16* a, const bf16* b, bf16* out, long n, cudaStream_t stream);
void cast_to_bf16(const float* x, bf16* y, long n, cudaStream_t stream);
void cast_to_float(const bf16* x, float* y, long n, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// LayerNorm

/// y (N, C) = (x - mean) rstd gamma + beta; mean, rstd (N) fp32 saved for backward (may be null).
void layernorm_forward(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean, float* rstd, int N,
                       int C, float eps, cudaStream_t stream);
/// dx (N, C) overwritten; dgamma, dbeta (C) fp32 +=.
void layernorm_backward(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean, const float* rstd,
                        bf16* dx, float* dgamma, float* dbeta, int N, int C, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy fused with the LM head's loss

/// losses (N) fp32 = logsumexp(logits row) - logit[target]; dlogits (N, V) = (softmax - onehot) * dloss
/// (null: loss only). dlogits may alias logits (the LM head's output buffer is reused in place).
/// A negative target is ignored (loss 0, zero gradient row).
void softmax_cross_entropy(const bf16* logits, const std::int32_t* targets, float* losses, bf16* dlogits, int N, int V,
                           float dloss, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Causal attention (FlashAttention-2 structure on bf16 tensor cores: tiled over keys, online
// softmax, the forward saves the log-sum-exp and the backward recomputes the probabilities; no
// (T, T) matrix is stored). sm_80 or later.

struct AttentionShape {
  int B = 0, T = 0, H = 0, D = 0;  // D in {32, 64, 128}
  float scale = 0;                 // softmax scale; 0 means 1 / sqrt(D)
  /// Keys per sequence, C >= T (0: C = T). Query i sees keys 0 .. C - T + i: a TeraPipe slice after
  /// C - T cached keys.
  int C = 0;
  /// Row strides in elements, multiples of 8 (0: H * D, the contiguous (B, T, H, D) layout).
  /// Element (b, i, h, d) of q is q[(b*T + i)*ld_q + h*D + d]; k, v and their gradients use ld_kv
  /// and C rows per sequence; o and dout use ld_o. The trainer's packed qkv is read in place.
  long ld_q = 0, ld_kv = 0, ld_o = 0;
  /// The backward adds into dk and dv (bf16, one rounding of old + new) instead of overwriting.
  bool accumulate_dkv = false;
  /// Stream the K/V (forward, dQ) and Q/dO (dK/dV) tiles through cp.async with two buffers, the
  /// next tile's copy overlapping this one's products (same arithmetic, more shared memory).
  bool pipelined = false;
};
/// Whether the launchers accept `s` (head dim, strides, key count); pointers must also be 16-byte
/// aligned.
bool attention_supports(const AttentionShape& s);
/// o bf16 and lse (B, H, T) fp32 (natural log) from q, k, v bf16.
void attention_forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
                       cudaStream_t stream);
/// fp32 scratch the backward needs: rowsum(dO o) per (B, H, T).
std::size_t attention_backward_workspace_bytes(const AttentionShape& s);
/// dq overwritten; dk, dv overwritten (or added to with accumulate_dkv); deterministic (no atomics).
void attention_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                        bf16* dq, bf16* dk, bf16* dv, void* workspace, const AttentionShape& s, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Embedding (tokens (B*T) int32; a token outside [0, V) yields a zero row and no gradient)

/// out (B*T, C) = wte[token] (V, C) + wpe[t] (T, C); wpe may be null.
void embedding_forward(const std::int32_t* tokens, const bf16* wte, const bf16* wpe, bf16* out, int B, int T, int C,
                       int V, cudaStream_t stream);
/// dwte (V, C) fp32 += scattered dout (B*T, C) rows; dwpe (T, C) fp32 += (may be null). Uses fp32
/// atomics: the summation order (not the math) varies between runs.
void embedding_backward(const std::int32_t* tokens, const bf16* dout, float* dwte, float* dwpe, int B, int T, int C,
                        int V, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Fused AdamW on fp32 master weights (PyTorch AdamW arithmetic; bias corrections for `step`, 1-based)

/// params, m, v (n) fp32 updated in place from fp32 grads; params_bf16 (n) (may be null) refreshed.
void adamw(float* params, const float* grads, float* m, float* v, bf16* params_bf16, long n, const AdamWConfig& c,
           int step, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Mixture of Experts (semantics in reference.hpp: top-k of the softmax, capacity first come first
// served choice-major, slot -1 = dropped)

void moe_router_forward(const float* logits, int N, int E, int k, int capacity, bool normalize, std::int32_t* expert,
                        float* gate, std::int32_t* slot, std::int32_t* counts, cudaStream_t stream);
void moe_router_backward(const float* logits, const std::int32_t* expert, const float* dgate, int N, int E, int k,
                         bool normalize, float* dlogits, cudaStream_t stream);
/// out (E, capacity, C) bf16: routed rows of x (N, C), unused slots zero.
void moe_permute(const bf16* x, const std::int32_t* expert, const std::int32_t* slot, bf16* out, int N, int k, int C,
                 int E, int capacity, cudaStream_t stream);
void moe_permute_backward(const bf16* dout, const std::int32_t* expert, const std::int32_t* slot, bf16* dx, int N, int k,
                          int C, int capacity, cudaStream_t stream);
/// y (N, C) = sum of gate * expert_out (E, capacity, C) rows over a token's kept assignments.
void moe_unpermute(const bf16* expert_out, const std::int32_t* expert, const std::int32_t* slot, const float* gate,
                   bf16* y, int N, int k, int C, int capacity, cudaStream_t stream);
void moe_unpermute_backward(const bf16* dy, const bf16* expert_out, const std::int32_t* expert, const std::int32_t* slot,
                            const float* gate, bf16* d_expert_out, float* dgate, int N, int k, int C, int E,
                            int capacity, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Host <-> device copies

/// Page-locked host memory (cudaHostAlloc, portable): needed for asynchronous, full-speed copies.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p);
/// Asynchronous copies on `stream` (host side must be pinned to overlap with compute).
void copy_h2d(void* dst_device, const void* src_host, std::size_t bytes, cudaStream_t stream);
void copy_d2h(void* dst_host, const void* src_device, std::size_t bytes, cudaStream_t stream);
void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace foresight::kernels
