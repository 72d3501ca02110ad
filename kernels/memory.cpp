// Pinned host memory and asynchronous copies: thin, checked wrappers over the CUDA runtime.
#include <cuda_runtime_api.h>

#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  FORESIGHT_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void pinned_free(void* p) {
  if (p) FORESIGHT_CUDA(cudaFreeHost(p));
}

void copy_h2d(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  FORESIGHT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_d2h(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  FORESIGHT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  FORESIGHT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace foresight::kernels
