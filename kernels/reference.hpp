// CPU reference twins of the CUDA kernels (kernels.hpp): the ground truth of the math, in float
// storage with double accumulation, no CUDA dependency. The GPU tests compare each launcher with
// its twin run on the same bf16-rounded inputs. Layouts are row-major and match the launchers'
// exactly; shapes are written in the comments as (rows, cols). Left out: speed.
//
// Conventions shared with kernels.hpp:
//  - "+=" in a parameter's comment means the result is accumulated into it (gradient accumulation
//    over micro-batches); everything else is overwritten.
//  - Attention tensors are (B, T, H, D): batch, token, head, head dimension; causal masking.
//  - Token ids and expert ids are int32.
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"

namespace foresight::kernels {

/// What a GEMM applies to its result before writing it (cuBLASLt epilogues). bias_gelu_aux also
/// writes the pre-activation (sum + bias) into an aux matrix for the backward (GELU_AUX_BIAS);
/// dgelu multiplies the sum by GeLU' of the aux matrix it reads (DGELU).
enum class Epilogue { none, bias, gelu, bias_gelu, bias_gelu_aux, dgelu };

/// C = alpha * op(A) op(B) (+ bias, GeLU) + beta * C, all row-major.
/// op(A) is (m, k): A is stored (m, k), or (k, m) when trans_a. op(B) is (k, n): B is stored
/// (k, n), or (n, k) when trans_b (a PyTorch Linear weight (out, in) is B with trans_b).
/// `batch` independent products. Each stored matrix may be a view into a wider one: lda, ldb and
/// ldc are the elements between the starts of consecutive stored rows (0: packed, the stored
/// width), and stride_a/b/c the elements between consecutive products of the batch (0: packed,
/// the stored rows times the leading dimension).
struct GemmDims {
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int batch = 1;
  long lda = 0, ldb = 0, ldc = 0;
  long stride_a = 0, stride_b = 0, stride_c = 0;

  long ld_a() const { return lda > 0 ? lda : (trans_a ? m : k); }
  long ld_b() const { return ldb > 0 ? ldb : (trans_b ? k : n); }
  long ld_c() const { return ldc > 0 ? ldc : n; }
  long batch_stride_a() const { return stride_a > 0 ? stride_a : long(trans_a ? k : m) * ld_a(); }
  long batch_stride_b() const { return stride_b > 0 ? stride_b : long(trans_b ? n : k) * ld_b(); }
  long batch_stride_c() const { return stride_c > 0 ? stride_c : long(m) * ld_c(); }
  /// Every leading dimension at least its stored matrix's width.
  bool leading_dims_cover_widths() const {
    return ld_a() >= (trans_a ? m : k) && ld_b() >= (trans_b ? k : n) && ld_c() >= n;
  }
};

/// GeLU, tanh approximation (GPT-2; Hendrycks & Gimpel 2016 eq. for the approximation).
float gelu(float x);
/// d gelu(x) / dx of the tanh approximation.
float gelu_grad(float x);

/// AdamW hyper-parameters (Loshchilov & Hutter 2019; PyTorch torch.optim.AdamW's update) on fp32 master weights.
struct AdamWConfig {
  float lr = 1e-4f;
  float beta1 = 0.9f, beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_scale = 1.0f;  // multiplies each gradient first (1 / loss scale, clipping factor)
};

namespace ref {

/// C (batch, m, n) = alpha * op(A) op(B) + beta * C, or with an epilogue gelu?(alpha * op(A) op(B)
/// + bias (n)). beta != 0 is allowed only with Epilogue::none (the order of the C term and the
/// epilogue would otherwise be a cuBLASLt detail); throws std::invalid_argument otherwise.
/// bias_gelu_aux writes the float pre-activation r = sum + bias into aux and gelu(r) into C;
/// dgelu writes float(sum) * gelu'(aux) into C. aux has C's shape and leading dimension.
void gemm(const float* A, const float* B, float* C, const GemmDims& d, const float* bias, Epilogue epilogue,
          float alpha = 1.0f, float beta = 0.0f, float* aux = nullptr);

/// db (n) += column sums of dy (m, n): the bias gradient of a linear layer.
void bias_grad(const float* dy, float* db, int m, int n);

/// y (n) = gelu(x).
void gelu_forward(const float* x, float* y, long n);
/// dx (n) = dy * gelu'(x).
void gelu_backward(const float* x, const float* dy, float* dx, long n);
/// out (n) = a + b.
void residual_add(const float* a, const float* b, float* out, long n);

/// y (N, C) = (x - mean) * rstd * gamma + beta per row; mean, rstd (N) saved for backward
/// (either may be null). rstd = 1 / sqrt(biased variance + eps).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int N, int C, float eps);
/// dx (N, C) overwritten; dgamma, dbeta (C) +=.
void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* dgamma, float* dbeta, int N, int C);

/// Softmax cross-entropy over logits (N, V) with targets (N): losses (N) = logsumexp - logit[target];
/// dlogits (N, V) = (softmax - onehot) * dloss (null: not computed). A negative target is ignored:
/// loss 0 and a zero gradient row.
void softmax_cross_entropy(const float* logits, const std::int32_t* targets, float* losses, float* dlogits, int N,
                           int V, float dloss);

/// Causal attention forward: o (B, T, H, D) = softmax(scale * q k^T, causal) v; lse (B, H, T) the
/// natural-log sum of exp of the scaled scores of each query row (saved for backward).
void attention_forward(const float* q, const float* k, const float* v, float* o, float* lse, int B, int T, int H,
                       int D, float scale);
/// Causal attention backward: dq, dk, dv (B, T, H, D) overwritten from do (B, T, H, D).
void attention_backward(const float* q, const float* k, const float* v, const float* o, const float* dout,
                        const float* lse, float* dq, float* dk, float* dv, int B, int T, int H, int D, float scale);

/// out (B*T, C) = wte[tokens] (V, C) + wpe[t] (T_max >= T, C); wpe may be null (no positions).
/// Throws std::out_of_range for a token outside [0, V).
void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int B, int T, int C,
                       int V);
/// dwte (V, C) += scatter of dout (B*T, C) rows by token; dwpe (T, C) += sums over the batch (may be null).
void embedding_backward(const std::int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B, int T, int C,
                        int V);

/// AdamW step: params, m, v (n) updated in place for step `step` (1-based, for bias correction); grads (n) read;
/// params_bf16 (n) (may be null) gets the rounded new weights.
void adamw(float* params, const float* grads, float* m, float* v, bf16* params_bf16, long n, const AdamWConfig& c,
           int step);

/// MoE top-k router with expert capacity (Switch Transformer / GShard style, first come first served).
/// probs = softmax(logits (N, E)); each token picks its k most probable experts (ties: lower id);
/// gate (N, k) = the picked probabilities, divided by their sum when `normalize`. Slots are given in
/// priority order choice-major (every token's first choice before any second choice, GShard), tokens
/// in index order within a choice; an expert takes at most `capacity` assignments, later ones get
/// slot -1 (dropped). expert, slot (N, k); counts (E) = accepted assignments per expert.
void moe_router_forward(const float* logits, int N, int E, int k, int capacity, bool normalize, std::int32_t* expert,
                        float* gate, std::int32_t* slot, std::int32_t* counts);
/// dlogits (N, E) from dgate (N, k) through the top-k gates and the softmax.
void moe_router_backward(const float* logits, const std::int32_t* expert, const float* dgate, int N, int E, int k,
                         bool normalize, float* dlogits);
/// Expert inputs (E, capacity, C): row (e, slot) = x (N, C) row of the token assigned there; unused
/// slots are zero.
void moe_permute(const float* x, const std::int32_t* expert, const std::int32_t* slot, float* out, int N, int k, int C,
                 int E, int capacity);
/// dx (N, C) = sum over a token's kept assignments of dout (E, capacity, C) rows.
void moe_permute_backward(const float* dout, const std::int32_t* expert, const std::int32_t* slot, float* dx, int N,
                          int k, int C, int capacity);
/// y (N, C) = sum over kept assignments of gate * expert_out (E, capacity, C) row.
void moe_unpermute(const float* expert_out, const std::int32_t* expert, const std::int32_t* slot, const float* gate,
                   float* y, int N, int k, int C, int capacity);
/// d_expert_out (E, capacity, C) = gate * dy at kept slots (0 elsewhere); dgate (N, k) = dy . row
/// (0 for dropped assignments).
void moe_unpermute_backward(const float* dy, const float* expert_out, const std::int32_t* expert,
                            const std::int32_t* slot, const float* gate, float* d_expert_out, float* dgate, int N,
                            int k, int C, int E, int capacity);

}  // namespace ref
}  // namespace foresight::kernels
