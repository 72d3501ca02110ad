// Runtime over MPI: errors come back as return codes (checked by mpi_check) instead of aborting.
// NCCL's rendezvous: the unique id made on rank 0 and broadcast over MPI.
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "foresight/config.hpp"
#include "trainer/backend.hpp"
#include "trainer/bootstrap.hpp"
#include "trainer/mpi_communicator.hpp"
#include "trainer/nccl_communicator.hpp"

namespace foresight::trainer {

namespace {

/// True when a launcher (mpirun/mpiexec, srun, a PMI/PMIx server) started this process; false for
/// a singleton, a binary run directly.
bool launched_by_a_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

}  // namespace

Runtime::Runtime(int& argc, char**& argv) {
  // A singleton Open MPI process forks an ORTE daemon (orted) in MPI_Init only so that it could
  // later MPI_Comm_spawn, which the trainer never does; that fork and its out-of-band wire-up are
  // the part of a singleton's start that can hang or fail on a busy or network-restricted machine
  // (open-mpi/ompi#3818, where the maintainers' answer is this parameter). Isolated, the singleton
  // starts no daemon. The user's own setting wins (no overwrite); other MPIs ignore the variable.
  if (!launched_by_a_launcher()) setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
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

namespace {

/// Throws SpecError when two ranks of `comm` sit on the same GPU of the same host (NCCL refuses
/// a communicator with two ranks on one device); `device` is this rank's CUDA device. Unused in
/// builds without NCCL.
[[maybe_unused]] void check_one_gpu_per_rank(MPI_Comm comm, int device) {
  struct Place {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int device = 0;
  };
  Place mine;
  int len = 0;
  mpi_check(MPI_Get_processor_name(mine.host, &len), "MPI_Get_processor_name");
  mine.device = device;
  int size = 1;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  auto all = std::vector<Place>(std::size_t(size));
  mpi_check(MPI_Allgather(&mine, int(sizeof(Place)), MPI_BYTE, all.data(), int(sizeof(Place)), MPI_BYTE, comm),
            "MPI_Allgather");
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      if (all[std::size_t(a)].device == all[std::size_t(b)].device &&
          std::strcmp(all[std::size_t(a)].host, all[std::size_t(b)].host) == 0) {
        std::ostringstream why;
        why << "ranks " << a << " and " << b << " share GPU " << all[std::size_t(a)].device << " of "
            << all[std::size_t(a)].host << ", and NCCL needs a GPU per rank (--comm mpi lets ranks share one)";
        throw SpecError(SourceLocation{"command line", 0, 0}, "--comm", "nccl", why.str());
      }
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_world(Communicator& world, Backend& backend) {
  const MPI_Comm comm = mpi_comm_of(world);
  const int rank = world.rank(), size = world.size();
  const bool real = backend.stream() != nullptr;
  NcclUniqueIdBytes id{};
  if (!real) {
    if (rank == 0) id = nccl_standin::unique_id();
    mpi_check(MPI_Bcast(id.data(), int(id.size()), MPI_BYTE, 0, comm), "MPI_Bcast");
    return nccl_standin::init_rank(id, size, rank, nullptr);
  }
#if FORESIGHT_HAVE_NCCL
  check_one_gpu_per_rank(comm, nccl_real::current_device());
  if (rank == 0) id = nccl_real::unique_id();
  mpi_check(MPI_Bcast(id.data(), int(id.size()), MPI_BYTE, 0, comm), "MPI_Bcast");
  return nccl_real::init_rank(id, size, rank, backend.stream());
#else
  throw SpecError(SourceLocation{"command line", 0, 0}, "--comm", "nccl",
                  "this build has no NCCL (the " + backend.name() + " backend's messages then go through MPI: --comm mpi)");
#endif
}

}  // namespace foresight::trainer
