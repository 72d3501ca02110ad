// GEMM through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output,
// fused bias / GeLU epilogues. cuBLASLt is column-major; a row-major C (m, n) = op(A) op(B) is the
// column-major C^T (n, m) = op(B)^T op(A)^T, so B is passed as cuBLASLt's "A" and A as its "B",
// with M = n, N = m and every transpose flag kept (a row-major buffer is the column-major
// transpose of itself). The bias then runs along cuBLASLt's M = our n: one value per output column.
#include <cublasLt.h>

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
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

void check_dims(const GemmDims& d, Epilogue e, float beta, const void* bias) {
  detail::require(d.m > 0 && d.n > 0 && d.k > 0 && d.batch > 0, "gemm: m, n, k and batch must be positive");
  detail::require(beta == 0.0f || e == Epilogue::none, "gemm: beta != 0 is only allowed without an epilogue");
  detail::require(d.batch == 1 || e == Epilogue::none, "gemm: epilogues are only supported with batch == 1");
  detail::require(bias || (e != Epilogue::bias && e != Epilogue::bias_gelu), "gemm: the epilogue needs a bias");
}

void run_gemm(BlasContext& ctx, const void* A, const void* B, void* C, const void* bias, cudaDataType_t c_type,
              const GemmDims& d, Epilogue e, float alpha, float beta, cudaStream_t stream) {
  check_dims(d, e, beta, bias);
  // cuBLASLt "A" = our B: stored (k, n) row-major = column-major (n, k), ld n, op N; or stored
  // (n, k) row-major = column-major (k, n), ld k, op T.
  const cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LtLayout la(CUDA_R_16BF, d.trans_b ? d.k : d.n, d.trans_b ? d.n : d.k, d.trans_b ? d.k : d.n, d.batch,
            std::int64_t(d.k) * d.n);
  // cuBLASLt "B" = our A: stored (m, k) = column-major (k, m), ld k, op N; or (k, m) = (m, k), ld m, op T.
  LtLayout lb(CUDA_R_16BF, d.trans_a ? d.m : d.k, d.trans_a ? d.k : d.m, d.trans_a ? d.m : d.k, d.batch,
            std::int64_t(d.m) * d.k);
  LtLayout lc(c_type, d.n, d.m, d.n, d.batch, std::int64_t(d.m) * d.n);
  LtMatmulDesc op;
  op.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  op.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  op.set(CUBLASLT_MATMUL_DESC_EPILOGUE, to_cublas(e));
  if (e == Epilogue::bias || e == Epilogue::bias_gelu) {
    op.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    op.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, c_type);  // bf16 bias with bf16 C, fp32 with fp32
  }
  auto handle = static_cast<cublasLtHandle_t>(ctx.handle());

  // The heuristic costs tens of microseconds: ask once per problem and keep its first answer.
  const std::string key = std::to_string(d.m) + "," + std::to_string(d.n) + "," + std::to_string(d.k) + "," +
                          std::to_string(d.batch) + "," + std::to_string(int(d.trans_a)) + std::to_string(int(d.trans_b)) +
                          "," + std::to_string(int(e)) + "," + std::to_string(int(c_type)) + "," +
                          std::to_string(int(beta != 0.0f));
  auto& cache = ctx.algo_cache();
  auto it = cache.find(key);
  cublasLtMatmulAlgo_t algo;
  if (it == cache.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    FORESIGHT_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t ws = ctx.workspace_bytes();
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle, op.h, la.h, lb.h, lc.h, lc.h, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    FORESIGHT_CUBLAS(st);
    if (found == 0) throw CudaError("cublasLtMatmulAlgoGetHeuristic found no algorithm for gemm " + key);
    algo = result.algo;
    it = cache.emplace(key, std::string(reinterpret_cast<const char*>(&algo), sizeof(algo))).first;
  }
  std::memcpy(&algo, it->second.data(), sizeof(algo));
  FORESIGHT_CUBLAS(cublasLtMatmul(handle, op.h, &alpha, B, la.h, A, lb.h, &beta, C, lc.h, C, lc.h, &algo,
                                  ctx.workspace(), ctx.workspace_bytes(), stream));
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

BlasContext::~BlasContext() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void gemm(BlasContext& ctx, const bf16* A, const bf16* B, bf16* C, const bf16* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  run_gemm(ctx, A, B, C, bias, CUDA_R_16BF, dims, epilogue, alpha, beta, stream);
}

void gemm(BlasContext& ctx, const bf16* A, const bf16* B, float* C, const float* bias, const GemmDims& dims,
          Epilogue epilogue, float alpha, float beta, cudaStream_t stream) {
  run_gemm(ctx, A, B, C, bias, CUDA_R_32F, dims, epilogue, alpha, beta, stream);
}

void expert_gemm(BlasContext& ctx, const bf16* x, const bf16* w, bf16* out, int experts, int capacity, int in,
                 int out_dim, cudaStream_t stream) {
  run_gemm(ctx, x, w, out, nullptr, CUDA_R_16BF,
           {.m = capacity, .n = out_dim, .k = in, .trans_a = false, .trans_b = true, .batch = experts}, Epilogue::none,
           1.0f, 0.0f, stream);
}

}  // namespace foresight::kernels
