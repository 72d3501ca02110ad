// The trainer's CUDA backend: every Backend op on one GPU. GEMMs (and attention's batched
// products) through cuBLAS, in fp32 ("cuda") or on TF32 tensor cores ("cuda-tf32"); the
// memory-bound ops in cuda_backend_kernels.cu, each the device twin of a CpuBackend loop, so that
// both backends agree to rounding and every plan the CPU trains runs unchanged on a GPU. Under
// --precision bf16 (precision.hpp) activations and the weights' working copy are packed 2-byte
// bf16 on the device, GEMMs read bf16 and accumulate in fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F)
// into a bf16 activation or an fp32 main gradient, and statistics, master weights, main gradients
// and moments stay fp32; the bf16 path is compiled but has not run on a GPU yet. Left out (next):
// the fast kernels of kernels/. Messages go over NCCL (nccl_communicator.hpp, ordered against
// stream()) or through the host to MPI (staging_communicator.hpp).
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"

namespace foresight::trainer {

/// `tf32`: cuBLAS may use TF32 tensor cores for fp32 GEMMs (10-bit mantissa products, fp32
/// accumulation; no effect under bf16, whose GEMMs are all bf16). `precision`: the recipe. The
/// device is local rank % visible GPUs (OMPI_COMM_WORLD_LOCAL_RANK, else 0). Throws SpecError
/// naming --backend when no GPU is visible.
std::unique_ptr<Backend> make_cuda_backend(bool tf32, Precision precision = Precision::fp32);

}  // namespace foresight::trainer
