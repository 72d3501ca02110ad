// A Communicator for device tensors over a host-memory one (MPI): each call copies the GPU tensor
// to a host tensor, runs the inner call, and copies the result back. Correct for every layout,
// including several ranks sharing one GPU, which NCCL refuses; slow (two PCIe copies per message,
// no overlap): with one GPU per rank, --comm nccl (nccl_communicator.hpp) is the fast path. One-rank
// groups skip the host: collectives are copies on the device.
#pragma once

#include <memory>

#include "trainer/backend.hpp"
#include "trainer/communicator.hpp"

namespace foresight::trainer {

/// Wraps `inner` (not owned; it must outlive the result) for tensors of `device` (not owned).
std::unique_ptr<Communicator> make_staging_communicator(Communicator& inner, Backend& device);

}  // namespace foresight::trainer
