// Rendezvous of the ranks: MPI_Init/MPI_Finalize and the world communicator (STYLE.md: bootstrap
// lives in its own file). A CUDA build bootstraps NCCL here too (the unique id broadcast over MPI).
// Without MPI in the build the world is one rank.
#pragma once

#include <memory>

#include "trainer/communicator.hpp"

namespace foresight::trainer {

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

}  // namespace foresight::trainer
