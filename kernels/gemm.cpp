// GEMM through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output,
// fused bias / GeLU epilogues. cuBLASLt is column-major; a row-major C (m, n) = op(A) op(B) is the
// column-major C^T (n, m) = op(B)^T op(A)^T, so B is passed as cuBLASLt's "A" and A as its "B",
// with M = n, N = m and every transpose flag kept (a row-major buffer is the column-major
// transpose of itself). The bias then runs along cuBLASLt's M = our n: one value per output column.
#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cublas_check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

cublasLtEpilogue_t to_cublas(Epilogue e) {
  switch (e) {
    case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::bias_gelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::bias_gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_bias(Epilogue e) { return e == Epilogue::bias || e == Epilogue::bias_gelu || e == Epilogue::bias_gelu_aux; }
bool has_aux(Epilogue e) { return e == Epilogue::bias_gelu_aux || e == Epilogue::dgelu; }

void check_dims(const GemmDims& d, Epilogue e, float beta, const void* bias, const void* aux) {
  detail::require(d.m > 0 && d.n > 0 && d.k > 0 && d.batch > 0, "gemm: m, n, k and batch must be positive");
  detail::require(beta == 0.0f || e == Epilogue::none, "gemm: beta != 0 is only allowed without an epilogue");
  detail::require(d.batch == 1 || e == Epilogue::none, "gemm: epilogues are only supported with batch == 1");
  detail::require(bias || !has_bias(e), "gemm: the epilogue needs a bias");
  detail::require(aux || !has_aux(e), "gemm: the epilogue needs an aux matrix");
  detail::require(d.leading_dims_cover_widths(), "gemm: a leading dimension below the stored width");
}

/// The largest power of two, up to 256, that divides a pointer: the alignment cuBLASLt may assume
/// of it (its MIN_ALIGNMENT preferences default to 256 bytes).
std::uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 1;
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return a;
}

/// One cuBLASLt matmul. False (when !must) if there is no algorithm for it, the bias is not
/// 16-byte aligned, or cuBLASLt refuses the call before launching anything; with `must` those throw.
bool run_gemm(BlasContext& ctx, const void* A, const void* B, void* C, const void* bias, void* aux,
              cudaDataType_t c_type, const GemmDims& d, Epilogue e, float alpha, float beta, cudaStream_t stream,
              bool must) {
  check_dims(d, e, beta, bias, aux);
  const bool with_bias = has_bias(e), with_aux = has_aux(e);
  // cuBLASLt's bias epilogue reads the vector with wide loads; a misaligned one fails (Marian's
  // note, marian-nmt src/tensors/gpu/prod.cpp). The GeLU aux matrix's leading dimension must be a
  // multiple of 8 (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); it is read and written like
  // C, so it is asked to be 16-byte aligned as well.
  const char* refused = with_bias && alignment(bias) < 16                        ? "a 16-byte-aligned bias"
                        : with_aux && (alignment(aux) < 16 || d.ld_c() % 8 != 0) ? "a 16-byte-aligned aux matrix, ldc a multiple of 8"
                        : with_aux && c_type != CUDA_R_16BF                      ? "a bf16 output"
                                                                                 : nullptr;
  if (refused) {
    if (must) throw CudaError(std::string("gemm: the epilogue needs ") + refused);
    return false;
  }
  // cuBLASLt "A" = our B: stored (k, n) row-major = column-major (n, k), op N; or stored (n, k)
  // = column-major (k, n), op T; its leading dimension is our ldb either way.
  const cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LtLayout la(CUDA_R_16BF, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, d.ld_b(), d.batch, d.batch_stride_b());
  // cuBLASLt "B" = our A: stored (m, k) = column-major (k, m), op N; or (k, m) = (m, k), op T.
  LtLayout lb(CUDA_R_16BF, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, d.ld_a(), d.batch, d.batch_stride_a());
  LtLayout lc(c_type, d.n, d.m, d.ld_c(), d.batch, d.batch_stride_c());
  LtMatmulDesc op;
  op.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  op.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  op.set(CUBLASLT_MATMUL_DESC_EPILOGUE, to_cublas(e));
  if (with_bias) {
    op.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    op.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, c_type);  // bf16 bias with bf16 C, fp32 with fp32
  }
  if (with_aux) {
    op.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    op.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t(d.ld_c()));
    op.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, std::int32_t(CUDA_R_16BF));
  }
  auto handle = static_cast<cublasLtHandle_t>(ctx.handle());
  const std::uint32_t align_a = alignment(B), align_b = alignment(A), align_c = alignment(C);

  // The heuristic costs tens of microseconds: ask once per problem and alignment, keep its first
  // answer (an empty entry: it had none).
  std::string key;
  for (const long v : {long(d.m), long(d.n), long(d.k), long(d.batch), long(d.trans_a), long(d.trans_b), long(e),
                       long(c_type), long(beta != 0.0f), d.ld_a(), d.ld_b(), d.ld_c(), d.batch_stride_a(),
                       d.batch_stride_b(), d.batch_stride_c(), long(align_a), long(align_b), long(align_c),
                       long(with_bias ? alignment(bias) : 0), long(with_aux ? alignment(aux) : 0)})
    key += std::to_string(v) + ",";
  auto& cache = ctx.algo_cache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    FORESIGHT_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    // Split-K partial sums in fp32 only: INPLACE and OUTPUT_TYPE reduce in C's type, which for a
    // bf16 C would round each partial sum (cublasLt.h, cublasLtReductionScheme_t).
    const std::uint32_t schemes = c_type == CUDA_R_32F ? std::uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)
                                                       : std::uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE |
                                                                       CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    const std::size_t ws = ctx.workspace_bytes();
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    auto pref_set = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v));
    };
    pref_set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws);
    pref_set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
    pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a);
    pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c);
    pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle, op.h, la.h, lb.h, lc.h, lc.h, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (must) FORESIGHT_CUBLAS(st);
    // NOT_SUPPORTED (or no answer) is the heuristic's "no algorithm"; any other failure is more
    // likely a descriptor this code set wrongly, so it is said once (the caller still falls back).
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      std::fprintf(stderr, "kernels::gemm: cuBLASLt's heuristic failed with %s for %s; falling back\n",
                   cublasLtGetStatusName(st), key.c_str());
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    it = cache.emplace(key, ok ? std::string(reinterpret_cast<const char*>(&result.algo), sizeof(result.algo))
                               : std::string()).first;
  }
  if (it->second.empty()) {
    if (must) throw CudaError("cublasLtMatmulAlgoGetHeuristic found no algorithm for gemm " + key);
    return false;
  }
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, it->second.data(), sizeof(algo));
  const cublasStatus_t st = cublasLtMatmul(handle, op.h, &alpha, B, la.h, A, lb.h, &beta, C, lc.h, C, lc.h, &algo,
                                           ctx.workspace(), ctx.workspace_bytes(), stream);
  if (!must && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
    // Refused before launching anything: this problem takes the caller's fallback from now on.
    it->second.clear();
    return false;
  }
  FORESIGHT_CUBLAS(st);
  return true;
}

}  // namespace

BlasContext::BlasContext(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  FORESIGHT_CUBLAS(cublasLtCreate(&h));
  handle_ = h;
  if (workspace_bytes_ > 0) {
    const cudaError_t e = cudaMalloc(&workspace_, workspace_bytes_);
    if (e != cudaSuccess) {
      cublasLtDestroy(h);
      detail::throw_cuda(e, "cudaMalloc(gemm workspace)", __FILE__, __LINE__);
    }
  }
}

BlasContext::BlasContext(void* workspace, std::size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), owns_workspace_(false) {
  cublasLtHandle_t h = nullptr;
  FORESIGHT_CUBLAS(cublasLtCreate(&h));
  handle_ = h;
}

BlasContext::~BlasContext() {
  if (workspace_ && owns_workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void gemm(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  run_gemm(ctx, A, B, C, bias, nullptr, CUDA_R_16BF, dims, epilogue, alpha, beta, stream, true);
}

void gemm(BlasContext& ctx, const bf16* A, const bf16* B, float* C, const float* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  run_gemm(ctx, A, B, C, bias, nullptr, CUDA_R_32F, dims, epilogue, alpha, beta, stream, true);
}

bool try_gemm(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, const GemmDims& dims,
              Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  return run_gemm(ctx, A, B, C, bias, nullptr, CUDA_R_16BF, dims, epilogue, alpha, beta, stream, false);
}

bool try_gemm(BlasContext& ctx, const bf16* A, const bf16* B, float* C, const float* bias, const GemmDims& dims,
              Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  return run_gemm(ctx, A, B, C, bias, nullptr, CUDA_R_32F, dims, epilogue, alpha, beta, stream, false);
}

bool try_gemm_aux(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, bf16* aux,
                  const GemmDims& dims, Epilogue epilogue, cudaStream_t stream) {
  detail::require(has_aux(epilogue), "try_gemm_aux: an epilogue with an aux matrix (bias_gelu_aux or dgelu)");
  return run_gemm(ctx, A, B, C, bias, aux, CUDA_R_16BF, dims, epilogue, 1.0f, 0.0f, stream, false);
}

void expert_gemm(BlasContext& ctx, const bf16* x, const bf16* w, bf16* out, int experts, int capacity, int in,
                 int out_dim, cudaStream_t stream) {
  run_gemm(ctx, x, w, out, nullptr, nullptr, CUDA_R_16BF,
           {.m = capacity, .n = out_dim, .k = in, .trans_a = false, .trans_b = true, .batch = experts}, Epilogue::none,
           1.0f, 0.0f, stream, true);
}

}  // namespace foresight::kernels
