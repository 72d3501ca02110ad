// The CPU backend: fp32 storage in host memory, every op written as plain loops that accumulate in
// double in a fixed order. Why not Eigen's GEMM: its blocking (and so its summation order) depends
// on the matrix shapes, which change with the tensor-parallel split; fixed-order double
// accumulation keeps every layout within rounding of the single-rank run (the CI acceptance is
// 1e-5 relative over 20 steps). It is the reference for the CUDA backend, not a fast path. Under the
// bf16 recipe the same loops run and each op rounds what it writes into a bf16 tensor (so a GEMM
// accumulates in double, rounds to fp32, then to bf16: the fp32 accumulator of a tensor core
// without its order dependence).
#pragma once

#include <memory>

#include "trainer/backend.hpp"

namespace foresight::trainer {

/// `precision`: fp32 (the reference), or bf16: activations and the weights' working copy rounded
/// to bf16 after every op (precision.hpp), statistics and gradient accumulation in fp32.
std::unique_ptr<Backend> make_cpu_backend(Precision precision = Precision::fp32);

/// "cpu-staged": the same backend with its tensors marked as device tensors, so that the trainer
/// routes every collective and pipeline message through the host-staging communicator the CUDA
/// backend needs (staging_communicator.hpp). For testing that path on machines without a GPU.
std::unique_ptr<Backend> make_cpu_staged_backend(Precision precision = Precision::fp32);

}  // namespace foresight::trainer
