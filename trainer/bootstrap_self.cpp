// Runtime without MPI: one rank.
#include <cstdlib>

#include "trainer/bootstrap.hpp"

namespace foresight::trainer {

Runtime::Runtime(int&, char**&) {}
Runtime::~Runtime() = default;
std::unique_ptr<Communicator> Runtime::world() { return make_self_communicator(); }
void Runtime::abort(int code) { std::exit(code); }

}  // namespace foresight::trainer
