// Collectives and point-to-point messages between ranks, behind one interface so the model and
// the schedule do not know whether MPI (CPU tensors, or CUDA tensors staged through the host) or
// NCCL (bootstrapped over MPI) carries them. A Communicator is one group of ranks; split() makes
// the tensor-, data- and pipeline-parallel groups. Asynchronous calls return a Request that must
// be waited before the tensor is read or written again; it keeps the tensor's buffer alive.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "trainer/tensor.hpp"

namespace foresight::trainer {

enum class ReduceOp { sum, max };

/// One message of an exchange(): send `tensor` to group rank `peer`, or receive into it.
struct Transfer {
  enum class Kind { send, recv };
  Kind kind = Kind::send;
  Tensor tensor;
  int peer = 0;
  int tag = 0;  // MPI matches on it; NCCL ignores it (a pair's messages meet in issue order)
};

/// An operation in flight; wait() blocks until it completes (idempotent).
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// What carries the messages: "mpi", "mpi-staged" (device tensors copied through the host),
  /// "nccl", "nccl-standin" (the NCCL communicator over the MPI stand-in) or "self".
  virtual const char* library() const = 0;

  /// The ranks that pass the same `color` form a new group, ordered by `key`. Collective.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// In-place all-reduce of every element of t over the group.
  virtual void all_reduce(Tensor t, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> all_reduce_async(Tensor t, ReduceOp op) = 0;
  /// In-place all-reduce of host doubles (scalars such as losses and norms).
  virtual void all_reduce(std::span<double> values, ReduceOp op) = 0;
  /// out (size * in.numel() elements) = the concatenation of every rank's `in`, in rank order.
  virtual void all_gather(Tensor out, const Tensor& in) = 0;
  /// out = this rank's 1/size() slice of the element-wise reduction of `in`.
  virtual void reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) = 0;
  /// in holds size() equal chunks, chunk i for rank i; out receives chunk `rank()` of every rank.
  virtual void all_to_all(Tensor out, const Tensor& in) = 0;
  /// Send to group rank `peer`, returning before the message is delivered (MPI buffers or queues
  /// it; NCCL queues it on the device, where it waits for the peer's receive; the NCCL stand-in
  /// blocks here until then). `tag` distinguishes messages between the same pair under MPI only.
  virtual std::unique_ptr<Request> send(const Tensor& t, int peer, int tag) = 0;
  /// Blocking receive into t from group rank `peer`.
  virtual void recv(Tensor t, int peer, int tag) = 0;
  /// Posts every transfer of `batch` at once and returns when all have completed (for device
  /// tensors: for every later operation of the compute stream), whatever order the peers post
  /// theirs in: an NCCL group (ncclGroupStart/End), MPI Isend/Irecv + Waitall. Sent tensors may be
  /// reused on return. Transfers to the same peer are matched in batch order.
  virtual void exchange(std::span<const Transfer> batch) = 0;
  virtual void barrier() = 0;
};

/// The one-rank group: collectives are identities. Used when MPI is absent.
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace foresight::trainer
