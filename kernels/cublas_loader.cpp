// Every cuBLAS and cuBLASLt function Foresight calls, defined here with the headers' own signatures
// (a mismatch is a compile error: two C declarations of one name) and forwarded to the library,
// which is dlopen'ed on the first call. foresight_kernels therefore does not link libcublas or
// libcublasLt, and a process that never calls them never maps them (cublas_loader.hpp says why).
//
// Library lookup: the soname first, as the dynamic linker would have found a linked library
// (LD_LIBRARY_PATH, the executable's RUNPATH, the loader cache), then the file this build was
// configured against (FORESIGHT_CUBLAS_PATH, FORESIGHT_CUBLASLT_PATH). A library that will not
// load makes every call return CUBLAS_STATUS_NOT_INITIALIZED after one line on stderr naming the
// library and the loader's message; cublasLtGetStatusName then returns that message.
//
// The forwarders are not exported to the dynamic symbol table (nothing the executable links
// references them), so cuBLAS's own calls into cuBLASLt never land here.
#include "kernels/cublas_loader.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <type_traits>

namespace {

#define FORESIGHT_STR2(x) #x
#define FORESIGHT_STR(x) FORESIGHT_STR2(x)

enum class Lib { blas, lt };

struct Library {
  void* handle = nullptr;
  std::string error;  // why it did not load (empty when it did)
};

Library open_library(const char* soname, const char* configured_path) {
  Library lib;
  lib.handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib.handle) return lib;
  lib.error = std::string(soname) + ": " + dlerror();
  if (configured_path && *configured_path) {
    lib.handle = dlopen(configured_path, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
      lib.error.clear();
      return lib;
    }
    lib.error += "; " + std::string(configured_path) + ": " + dlerror();
  }
  return lib;
}

#ifdef FORESIGHT_CUBLASLT_PATH
constexpr const char* kCublasLtPath = FORESIGHT_CUBLASLT_PATH;
#else
constexpr const char* kCublasLtPath = nullptr;
#endif
#ifdef FORESIGHT_CUBLAS_PATH
constexpr const char* kCublasPath = FORESIGHT_CUBLAS_PATH;
#else
constexpr const char* kCublasPath = nullptr;
#endif

Library load(const char* soname, const char* configured_path, const char* what) {
  Library l = open_library(soname, configured_path);
  if (!l.handle) std::fprintf(stderr, "foresight: cannot load %s (%s)\n", what, l.error.c_str());
  return l;
}

// Opened once per process; function-local statics make the first call thread-safe.
const Library& library(Lib which) {
  if (which == Lib::lt) {
    static const Library lt = load("libcublasLt.so." FORESIGHT_STR(CUBLAS_VER_MAJOR), kCublasLtPath, "cuBLASLt");
    return lt;
  }
  static const Library blas = load("libcublas.so." FORESIGHT_STR(CUBLAS_VER_MAJOR), kCublasPath, "cuBLAS");
  return blas;
}

void* symbol(Lib which, const char* name) {
  const Library& lib = library(which);
  return lib.handle ? dlsym(lib.handle, name) : nullptr;
}

// One resolved pointer per forwarded function (F is the function's own address, so each gets its
// own static), then the call; a missing library or symbol gives the failure value.
template <auto F, class... Args>
auto forward(Lib which, const char* name, Args... args) {
  using Fn = decltype(F);
  using Ret = std::invoke_result_t<Fn, Args...>;
  static const Fn real = reinterpret_cast<Fn>(symbol(which, name));
  if (!real) {
    if constexpr (std::is_same_v<Ret, const char*>) {
      const Library& lib = library(which);
      static const std::string message =
          lib.handle ? std::string(name) + " not found in the loaded library" : "library not loaded: " + lib.error;
      return message.c_str();
    } else {
      return CUBLAS_STATUS_NOT_INITIALIZED;
    }
  }
  return real(args...);
}

// The forwarder's body: the function's address picks its resolved pointer, its name (the symbol
// looked up in the library) is spelled from the same token, so the two cannot disagree.
#define FORESIGHT_FORWARD(lib, fn, ...) forward<&fn>(lib, #fn, __VA_ARGS__)

// Every forwarded name, for cublas_available().
struct Name {
  Lib lib;
  const char* name;
};
constexpr Name kForwarded[] = {
    {Lib::lt, "cublasLtCreate"},
    {Lib::lt, "cublasLtDestroy"},
    {Lib::lt, "cublasLtGetStatusName"},
    {Lib::lt, "cublasLtMatmul"},
    {Lib::lt, "cublasLtMatmulAlgoGetHeuristic"},
    {Lib::lt, "cublasLtMatmulDescCreate"},
    {Lib::lt, "cublasLtMatmulDescDestroy"},
    {Lib::lt, "cublasLtMatmulDescSetAttribute"},
    {Lib::lt, "cublasLtMatmulPreferenceCreate"},
    {Lib::lt, "cublasLtMatmulPreferenceDestroy"},
    {Lib::lt, "cublasLtMatmulPreferenceSetAttribute"},
    {Lib::lt, "cublasLtMatrixLayoutCreate"},
    {Lib::lt, "cublasLtMatrixLayoutDestroy"},
    {Lib::lt, "cublasLtMatrixLayoutSetAttribute"},
    {Lib::lt, "cublasLtMatrixLayoutGetAttribute"},
    {Lib::blas, "cublasCreate_v2"},
    {Lib::blas, "cublasDestroy_v2"},
    {Lib::blas, "cublasSetStream_v2"},
    {Lib::blas, "cublasSetMathMode"},
    {Lib::blas, "cublasSgemmStridedBatched"},
    {Lib::blas, "cublasGemmStridedBatchedEx"},
};

}  // namespace

// The forwarders. Names are the libraries' symbols: cublas_v2.h maps cublasCreate, cublasDestroy
// and cublasSetStream to their _v2 symbols.
extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* light_handle) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtCreate, light_handle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t light_handle) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtDestroy, light_handle);
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtGetStatusName, status);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t light_handle, cublasLtMatmulDesc_t compute_desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmul, light_handle, compute_desc, alpha, a, a_desc, b, b_desc, beta, c,
                           c_desc, d, d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t light_handle, cublasLtMatmulDesc_t operation_desc,
                                              cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t preference, int requested_algo_count,
                                              cublasLtMatmulHeuristicResult_t heuristic_results_array[],
                                              int* return_algo_count) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulAlgoGetHeuristic, light_handle, operation_desc, a_desc, b_desc,
                           c_desc, d_desc, preference, requested_algo_count, heuristic_results_array,
                           return_algo_count);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmul_desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulDescCreate, matmul_desc, compute_type, scale_type);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmul_desc) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulDescDestroy, matmul_desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmul_desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size_in_bytes) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulDescSetAttribute, matmul_desc, attr, buf, size_in_bytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size_in_bytes) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, size_in_bytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* mat_layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatrixLayoutCreate, mat_layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t mat_layout) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatrixLayoutDestroy, mat_layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t mat_layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size_in_bytes) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatrixLayoutSetAttribute, mat_layout, attr, buf, size_in_bytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t mat_layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t size_in_bytes, size_t* size_written) {
  return FORESIGHT_FORWARD(Lib::lt, cublasLtMatrixLayoutGetAttribute, mat_layout, attr, buf, size_in_bytes,
                           size_written);
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  return FORESIGHT_FORWARD(Lib::blas, cublasCreate_v2, handle);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return FORESIGHT_FORWARD(Lib::blas, cublasDestroy_v2, handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return FORESIGHT_FORWARD(Lib::blas, cublasSetStream_v2, handle, stream);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return FORESIGHT_FORWARD(Lib::blas, cublasSetMathMode, handle, mode);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* a, int lda,
                                         long long int stride_a, const float* b, int ldb, long long int stride_b,
                                         const float* beta, float* c, int ldc, long long int stride_c,
                                         int batch_count) {
  return FORESIGHT_FORWARD(Lib::blas, cublasSgemmStridedBatched, handle, transa, transb, m, n, k, alpha, a, lda,
                           stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch_count);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long int stride_a, const void* b, cudaDataType b_type, int ldb,
                                          long long int stride_b, const void* beta, void* c, cudaDataType c_type,
                                          int ldc, long long int stride_c, int batch_count,
                                          cublasComputeType_t compute_type, cublasGemmAlgo_t algo) {
  // cublas_api.h adds a C++ overload (cudaDataType compute type) that forwards here; the cast picks
  // the library's own.
  using Fn =
      cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                         cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
                         void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  return forward<static_cast<Fn>(&cublasGemmStridedBatchedEx)>(
      Lib::blas, "cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b,
      b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batch_count, compute_type, algo);
}

}  // extern "C"

namespace foresight::kernels {

bool cublas_available(std::string* why) {
  for (Lib l : {Lib::lt, Lib::blas}) {
    if (!library(l).handle) {
      if (why) *why = library(l).error;
      return false;
    }
  }
  for (const Name& n : kForwarded) {
    if (!symbol(n.lib, n.name)) {
      if (why) *why = std::string(n.name) + " is not exported by " + (n.lib == Lib::lt ? "libcublasLt" : "libcublas");
      return false;
    }
  }
  return true;
}

bool cublaslt_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublasLt.so") != std::string::npos) return true;
  return false;
}

}  // namespace foresight::kernels
