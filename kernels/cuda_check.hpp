// The one checking wrapper for CUDA runtime calls and kernel launches inside kernels/ and
// calibrate/ (STYLE.md item 6): a failure throws CudaError naming the call, file:line and status.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/kernels.hpp"

namespace foresight::kernels::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace foresight::kernels::detail

#define FORESIGHT_CUDA(call)                                                                          \
  do {                                                                                                \
    const cudaError_t foresight_cuda_status_ = (call);                                                \
    if (foresight_cuda_status_ != cudaSuccess)                                                        \
      ::foresight::kernels::detail::throw_cuda(foresight_cuda_status_, #call, __FILE__, __LINE__);    \
  } while (0)

/// After a <<<...>>> launch: reports a bad configuration at once (execution errors surface at the
/// next synchronising call, as always in CUDA), and clears it, so that one failed launch is not
/// reported again by every later check.
#define FORESIGHT_CUDA_LAUNCHED(name) FORESIGHT_CUDA(cudaGetLastError())
