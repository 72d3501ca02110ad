// Runtime over MPI: errors come back as return codes (checked by mpi_check) instead of aborting.
#include "trainer/bootstrap.hpp"
#include "trainer/mpi_communicator.hpp"

namespace foresight::trainer {

Runtime::Runtime(int& argc, char**& argv) {
  mpi_check(MPI_Init(&argc, &argv), "MPI_Init");
  initialized_ = true;
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

Runtime::~Runtime() {
  if (initialized_) MPI_Finalize();
}

std::unique_ptr<Communicator> Runtime::world() { return make_mpi_communicator(MPI_COMM_WORLD, false); }

void Runtime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  __builtin_unreachable();
}

}  // namespace foresight::trainer
