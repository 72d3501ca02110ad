// Rendezvous of the ranks: MPI_Init/MPI_Finalize and the world communicator (STYLE.md: bootstrap
// lives in its own file), and NCCL's: rank 0's unique id broadcast over MPI, then
// ncclCommInitRank (make_nccl_world). Without MPI in the build the world is one rank and NCCL is
// not offered.
#pragma once

#include <memory>

#include "trainer/communicator.hpp"

namespace foresight::trainer {

class Backend;

/// Owns the process-wide message-passing runtime for the lifetime of `main`.
class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// A communicator over every launched rank.
  std::unique_ptr<Communicator> world();
  /// Ends every rank with `code` (for errors seen by one rank only, where the others would hang).
  [[noreturn]] void abort(int code);

 private:
  bool initialized_ = false;
};

/// An NCCL communicator over every rank of `world` (from Runtime::world()): ncclGetUniqueId on
/// rank 0, broadcast over MPI, ncclCommInitRank on each rank's current device. Real NCCL when
/// `backend` computes on a CUDA stream, else the MPI-backed stand-in (nccl_standin.cpp) on host
/// tensors. Throws SpecError naming --comm where this build or machine cannot: no MPI, a CUDA
/// backend without NCCL in the build, two ranks on one GPU (NCCL refuses). Collective.
std::unique_ptr<Communicator> make_nccl_world(Communicator& world, Backend& backend);

}  // namespace foresight::trainer
