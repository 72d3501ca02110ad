#include "trainer/backend.hpp"

#include "core/error.hpp"
#include "foresight/config.hpp"
#include "trainer/cpu_backend.hpp"
#if FORESIGHT_HAVE_CUDA
#include "trainer/cuda_backend.hpp"
#endif

namespace foresight::trainer {

std::unique_ptr<Backend> make_backend(const std::string& name, Precision precision) {
  if (name == "cpu") return make_cpu_backend(precision);
  if (name == "cpu-staged") return make_cpu_staged_backend(precision);
#if FORESIGHT_HAVE_CUDA
  if (name == "cuda" || name == "cuda-tf32") {
    // Refused before a device is touched, so the answer is the same with or without a GPU.
    if (precision != Precision::fp32)
      throw SpecError(SourceLocation{"command line", 0, 0}, "--precision", to_string(precision),
                      "the " + name + " backend runs fp32 only so far (bf16 runs on --backend cpu)");
    return make_cuda_backend(name == "cuda-tf32");
  }
  throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", name, "must be cpu, cuda or cuda-tf32");
#else
  // Asking for a backend this build lacks is a user error rather than a silent fallback.
  throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", name,
                  "must be cpu (this build has no CUDA toolkit, so no cuda backend)");
#endif
}

}  // namespace foresight::trainer
