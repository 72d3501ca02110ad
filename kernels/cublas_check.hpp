// The checking wrapper for cuBLAS and cuBLASLt calls (both return cublasStatus_t), beside
// FORESIGHT_CUDA in cuda_check.hpp: a failure throws CudaError naming the call, file:line and status.
// Also the scope holders of one cuBLASLt call's descriptors (kernels/gemm.cpp and the trainer's
// CUDA backend build their calls from them).
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "kernels/kernels.hpp"

#define FORESIGHT_CUBLAS(call)                                                                              \
  do {                                                                                                      \
    const cublasStatus_t foresight_blas_status_ = (call);                                                   \
    if (foresight_blas_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      throw ::foresight::kernels::CudaError(std::string(#call) + " failed at " + __FILE__ + ":" +            \
                                            std::to_string(__LINE__) + ": " +                                \
                                            cublasLtGetStatusName(foresight_blas_status_));                  \
  } while (0)

namespace foresight::kernels {

/// A cuBLASLt matrix layout (column-major rows x cols, leading dimension ld; `batch` matrices
/// `stride` elements apart when batch > 1), destroyed on scope exit.
struct LtLayout {
  cublasLtMatrixLayout_t h = nullptr;
  LtLayout(cudaDataType_t t, std::uint64_t rows, std::uint64_t cols, std::int64_t ld, int batch = 1,
           std::int64_t stride = 0) {
    FORESIGHT_CUBLAS(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld));
    if (batch > 1) {
      FORESIGHT_CUBLAS(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
      FORESIGHT_CUBLAS(
          cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }
  ~LtLayout() { cublasLtMatrixLayoutDestroy(h); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};

/// A cuBLASLt matmul descriptor (fp32 compute and scale), destroyed on scope exit.
struct LtMatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  LtMatmulDesc() { FORESIGHT_CUBLAS(cublasLtMatmulDescCreate(&h, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~LtMatmulDesc() { cublasLtMatmulDescDestroy(h); }
  LtMatmulDesc(const LtMatmulDesc&) = delete;
  LtMatmulDesc& operator=(const LtMatmulDesc&) = delete;
  template <class T>
  void set(cublasLtMatmulDescAttributes_t a, const T& v) {
    FORESIGHT_CUBLAS(cublasLtMatmulDescSetAttribute(h, a, &v, sizeof(v)));
  }
};

}  // namespace foresight::kernels
