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
  if (name == "cuda" || name == "cuda-tf32") return make_cuda_backend(name == "cuda-tf32", precision);
  throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", name, "must be cpu, cuda or cuda-tf32");
#else
  // Asking for a backend this build lacks is a user error rather than a silent fallback.
  throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", name,
                  "must be cpu (this build has no CUDA toolkit, so no cuda backend)");
#endif
}

}  // namespace foresight::trainer
