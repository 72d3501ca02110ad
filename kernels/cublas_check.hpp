// The checking wrapper for cuBLAS and cuBLASLt calls (both return cublasStatus_t), beside
// FORESIGHT_CUDA in cuda_check.hpp: a failure throws CudaError naming the call, file:line and status.
#pragma once

#include <cublasLt.h>

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
