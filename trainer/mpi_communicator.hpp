// The MPI implementation of Communicator, for host tensors. Every MPI call goes through one
// checking wrapper that names the call. CUDA tensors reach it through a host-staging wrapper of
// the CUDA backend (how several ranks share one GPU in tests, where NCCL refuses).
#pragma once

#include <memory>

#include <mpi.h>

#include "trainer/communicator.hpp"

namespace foresight::trainer {

/// Wraps `comm` (not owned when it is MPI_COMM_WORLD; owned and freed otherwise).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool owned);

/// The MPI communicator under `c`, which must come from make_mpi_communicator (InternalError otherwise).
MPI_Comm mpi_comm_of(const Communicator& c);

/// Throws InternalError naming `call` when `rc` is not MPI_SUCCESS.
void mpi_check(int rc, const char* call);

}  // namespace foresight::trainer
