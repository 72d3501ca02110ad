// Runtime without MPI: one rank.
#include <cstdlib>

#include "core/error.hpp"
#include "trainer/bootstrap.hpp"

namespace foresight::trainer {

Runtime::Runtime(int&, char**&) {}
Runtime::~Runtime() = default;
std::unique_ptr<Communicator> Runtime::world() { return make_self_communicator(); }
void Runtime::abort(int code) { std::exit(code); }

std::unique_ptr<Communicator> make_nccl_world(Communicator&, Backend&) {
  throw SpecError(SourceLocation{"command line", 0, 0}, "--comm", "nccl",
                  "this build has no MPI, which NCCL is bootstrapped over (and its CPU stand-in runs on): use --comm mpi");
}

}  // namespace foresight::trainer
