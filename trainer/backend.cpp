#include "trainer/backend.hpp"

#include "core/error.hpp"
#include "trainer/cpu_backend.hpp"

namespace foresight::trainer {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  // The CUDA backend (kernels/, cuBLASLt, NCCL) implements Backend when kernels/ lands; until
  // then asking for it is a user error rather than a silent fallback to the CPU.
  throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", name,
                  "must be cpu (the CUDA backend is not part of this build yet)");
}

}  // namespace foresight::trainer
