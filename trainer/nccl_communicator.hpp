// The NCCL implementation of Communicator: every collective and point-to-point message of the
// trainer on NCCL (nccl_communicator.cpp, written against nccl_api.hpp). One communication stream
// per communicator; each call first makes that stream wait for the compute stream (an event), so
// it reads what the compute stream wrote, and a Request's wait() makes the compute stream wait for
// the call (an event) without blocking the host. split() is ncclCommSplit. The same source is
// compiled twice: against real NCCL (namespace nccl_real, device tensors, CUDA builds with NCCL)
// and against the MPI-backed stand-in (namespace nccl_standin, host tensors, every MPI build), which
// is how CI runs this code. The rendezvous (ncclGetUniqueId broadcast over MPI) is the bootstrap's
// (bootstrap_mpi.cpp: make_nccl_world).
#pragma once

#include <array>
#include <memory>

#include "trainer/communicator.hpp"

namespace foresight::trainer {

/// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES), as the bootstrap broadcasts them.
using NcclUniqueIdBytes = std::array<char, 128>;

// What each flavour of nccl_communicator.cpp exports: nccl_real is defined only in builds with
// NCCL (config::kHaveNccl), nccl_standin in builds with MPI. The two lists are the same.
namespace nccl_real {
/// ncclGetUniqueId: a new id, on the one rank that then passes it to the others.
NcclUniqueIdBytes unique_id();
/// ncclCommInitRank on the current device, collective over the `nranks` ranks holding `id`;
/// `compute_stream`: the cudaStream_t the backend computes on.
std::unique_ptr<Communicator> init_rank(const NcclUniqueIdBytes& id, int nranks, int rank, void* compute_stream);
/// The current CUDA device (cudaGetDevice).
int current_device();
}  // namespace nccl_real
namespace nccl_standin {
NcclUniqueIdBytes unique_id();
/// The stand-in ignores the stream (its operations complete on the host).
std::unique_ptr<Communicator> init_rank(const NcclUniqueIdBytes& id, int nranks, int rank, void* compute_stream);
int current_device();  // 0
}  // namespace nccl_standin

}  // namespace foresight::trainer
