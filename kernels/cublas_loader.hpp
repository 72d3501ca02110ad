// cuBLAS and cuBLASLt are opened on first use, not at program start (kernels/cublas_loader.cpp).
// Linked the usual way, libcublasLt (540 MB in CUDA 13) is mapped, relocated and initialised in
// every process that links foresight_kernels, GPU work or not: 0.33 s of CPU per process on the
// CI machine, about half of `foresight --help` and of a CPU-backend foresight-train rank.
#pragma once

#include <string>

namespace foresight::kernels {

/// Whether libcublas and libcublasLt load and export every function Foresight calls. When not,
/// `why` (if given) names the library or symbol and the loader's message. Loads both libraries.
bool cublas_available(std::string* why = nullptr);

/// Whether this process has libcublasLt mapped (read from /proc/self/maps): false until the first
/// cuBLAS or cuBLASLt call, or cublas_available(). For the test that keeps the loading lazy.
bool cublaslt_mapped();

}  // namespace foresight::kernels
