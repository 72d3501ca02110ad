// The trainer's CUDA backend: every Backend op on one GPU, fp32 storage. GEMMs (and attention's
// batched products) through cuBLAS, in fp32 ("cuda") or on TF32 tensor cores ("cuda-tf32"); the
// memory-bound ops in cuda_backend_kernels.cu, each the device twin of a CpuBackend loop, so that
// both backends agree to fp32 rounding and every plan the CPU trains runs unchanged on a GPU.
// Left out (next): bf16 activations with the fast kernels of kernels/. Messages go over NCCL
// (nccl_communicator.hpp, ordered against stream()) or through the host to MPI
// (staging_communicator.hpp).
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"

namespace foresight::trainer {

/// `tf32`: cuBLAS may use TF32 tensor cores for fp32 GEMMs (10-bit mantissa products, fp32
/// accumulation). The device is local rank % visible GPUs (OMPI_COMM_WORLD_LOCAL_RANK, else 0).
/// Throws SpecError naming --backend when no GPU is visible.
std::unique_ptr<Backend> make_cuda_backend(bool tf32);

}  // namespace foresight::trainer
