// The NCCL stand-in: the subset of NCCL and the CUDA runtime that nccl_api.hpp declares,
// implemented over MPI for host memory, so that CI (no GPU) runs the NCCL communicator's code.
//
// Emulated, because correctness depends on it:
//  - collectives run in issue order per communicator (MPI's rule too), blocking the host;
//  - point-to-point has no tags: every message goes with tag 0, and MPI's non-overtaking rule then
//    matches a pair's messages in issue order, as NCCL does;
//  - a send outside a group is a rendezvous (MPI_Ssend): it completes only once the peer has
//    posted the matching receive, which is what NCCL may do (and does, for large messages) on the
//    device. A schedule that relies on buffered sends deadlocks here as it would on GPUs;
//  - ncclGroupStart/End collects sends and receives and posts them together at the outermost
//    End (MPI_Issend/MPI_Irecv), which returns when all have completed: a group completes only
//    when all of its operations can;
//  - ncclCommInitRank checks that every rank holds the same unique id (the bootstrap's broadcast)
//    and distinct ranks; ncclCommSplit is MPI_Comm_split with the same color/key rules.
// Not emulated (only speed or device resources depend on it): streams and events are host-side
// tokens, and every operation has completed when its call returns, so there is no overlap of
// communication with computation, and ordering bugs between the compute and communication streams
// cannot show here (the host runs every operation in issue order). Host blocking is stricter
// than NCCL's stream blocking for deadlocks, never looser: merging the streams of a rank into one
// sequence only adds waits. Collectives inside a group, in-place reduce-scatter, NCCL_SPLIT_NOCOLOR
// and communicators over part of MPI_COMM_WORLD at init are refused (ncclInvalidUsage), as the
// communicator never uses them.
#include "trainer/nccl_api.hpp"

#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

namespace foresight::trainer::nccl_standin {

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};
struct CUstream_st {
  int unused = 0;
};
struct CUevent_st {
  int unused = 0;
};

namespace {

/// A send or receive held by an open group.
struct Pending {
  bool send = false;
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_FLOAT;
  int peer = 0;
  MPI_Comm comm = MPI_COMM_NULL;
};
// The trainer calls NCCL from one thread (the watchdog never does), as NCCL's group state is
// per thread too.
thread_local int group_depth = 0;
thread_local std::vector<Pending> group;
// Live streams and events: using one after destroying it is an error here as on a GPU.
std::set<const void*> live_handles;

constexpr int kTag = 0;  // NCCL has no tags

ncclResult_t from_mpi(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

bool to_mpi(ncclDataType_t t, MPI_Datatype* out) {
  if (t == ncclFloat32) *out = MPI_FLOAT;
  else if (t == ncclFloat64) *out = MPI_DOUBLE;
  else return false;
  return true;
}
bool to_mpi(ncclRedOp_t op, MPI_Op* out) {
  if (op == ncclSum) *out = MPI_SUM;
  else if (op == ncclMax) *out = MPI_MAX;
  else return false;
  return true;
}
std::size_t size_of(ncclDataType_t t) { return t == ncclFloat64 ? 8 : 4; }

bool usable(ncclComm_t comm, cudaStream_t stream) {
  return comm != nullptr && comm->mpi != MPI_COMM_NULL && (stream == nullptr || live_handles.count(stream) > 0);
}

/// The checks every call carrying `count` elements makes; on success sets `type`.
ncclResult_t prepare(std::size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                     MPI_Datatype* type) {
  if (!usable(comm, stream) || !to_mpi(datatype, type) || count > std::size_t(INT_MAX)) return ncclInvalidArgument;
  return ncclSuccess;
}

ncclResult_t point_to_point(bool send, const void* buffer, std::size_t count, ncclDataType_t datatype, int peer,
                            ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type;
  if (const ncclResult_t rc = prepare(count, datatype, comm, stream, &type); rc != ncclSuccess) return rc;
  if (peer < 0 || peer >= comm->size) return ncclInvalidArgument;
  if (group_depth > 0) {
    group.push_back(Pending{.send = send, .buffer = const_cast<void*>(buffer), .count = int(count), .type = type,
                            .peer = peer, .comm = comm->mpi});
    return ncclSuccess;
  }
  if (send) return from_mpi(MPI_Ssend(buffer, int(count), type, peer, kTag, comm->mpi));
  return from_mpi(MPI_Recv(const_cast<void*>(buffer), int(count), type, peer, kTag, comm->mpi, MPI_STATUS_IGNORE));
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  // Unique per process and call, which is all the stand-in needs: init checks that every rank
  // received the same bytes.
  static unsigned long calls = 0;
  std::memset(id->internal, 0, sizeof(id->internal));
  const unsigned long pid = static_cast<unsigned long>(getpid()), call = ++calls;
  std::memcpy(id->internal, "foresight-nccl-standin", 22);
  std::memcpy(id->internal + 32, &pid, sizeof(pid));
  std::memcpy(id->internal + 48, &call, sizeof(call));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int world = 0;
  if (MPI_Comm_size(MPI_COMM_WORLD, &world) != MPI_SUCCESS) return ncclSystemError;
  if (nranks != world || group_depth > 0) return ncclInvalidUsage;
  if (rank < 0 || rank >= nranks) return ncclInvalidArgument;
  MPI_Comm c;
  if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c) != MPI_SUCCESS) return ncclSystemError;
  std::vector<char> all(std::size_t(nranks) * sizeof(id.internal));
  int mine = -1;
  if (MPI_Allgather(id.internal, int(sizeof(id.internal)), MPI_BYTE, all.data(), int(sizeof(id.internal)), MPI_BYTE,
                    c) != MPI_SUCCESS ||
      MPI_Comm_rank(c, &mine) != MPI_SUCCESS) {
    MPI_Comm_free(&c);
    return ncclSystemError;
  }
  bool same = true;
  for (int r = 0; r < nranks; ++r)
    same = same && std::memcmp(all.data() + std::size_t(r) * sizeof(id.internal), id.internal, sizeof(id.internal)) == 0;
  // Ranks sort by `rank` (ties by world rank), so a repeated rank leaves some rank elsewhere.
  int ok[1] = {same && mine == rank ? 1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, ok, 1, MPI_INT, MPI_MIN, c);
  if (!ok[0]) {
    MPI_Comm_free(&c);
    return ncclInvalidArgument;
  }
  *comm = new ncclComm{.mpi = c, .rank = rank, .size = nranks};
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!usable(comm, nullptr) || config != nullptr || group_depth > 0 || color < 0) return ncclInvalidUsage;
  MPI_Comm c;
  if (MPI_Comm_split(comm->mpi, color, key, &c) != MPI_SUCCESS) return ncclSystemError;
  auto* out = new ncclComm{.mpi = c, .rank = 0, .size = 1};
  MPI_Comm_rank(c, &out->rank);
  MPI_Comm_size(c, &out->size);
  *newcomm = out;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (stand-in)";
    case ncclSystemError: return "an MPI call failed (stand-in)";
    case ncclInternalError: return "internal error (stand-in)";
    case ncclInvalidArgument: return "invalid argument (stand-in)";
    case ncclInvalidUsage: return "invalid usage (stand-in: a call outside the subset it emulates)";
  }
  return "unknown result";
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type;
  MPI_Op mop;
  if (const ncclResult_t rc = prepare(count, datatype, comm, stream, &type); rc != ncclSuccess) return rc;
  if (!to_mpi(op, &mop)) return ncclInvalidArgument;
  if (group_depth > 0) return ncclInvalidUsage;
  return from_mpi(MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff, int(count), type, mop,
                                comm->mpi));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type;
  MPI_Op mop;
  if (const ncclResult_t rc = prepare(recvcount, datatype, comm, stream, &type); rc != ncclSuccess) return rc;
  if (!to_mpi(op, &mop)) return ncclInvalidArgument;
  const auto* in = static_cast<const char*>(sendbuff);
  const auto* out = static_cast<const char*>(recvbuff);
  const std::size_t in_bytes = recvcount * std::size_t(comm->size) * size_of(datatype);
  if (group_depth > 0 || (out >= in && out < in + in_bytes)) return ncclInvalidUsage;
  return from_mpi(MPI_Reduce_scatter_block(sendbuff, recvbuff, int(recvcount), type, mop, comm->mpi));
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type;
  if (const ncclResult_t rc = prepare(sendcount, datatype, comm, stream, &type); rc != ncclSuccess) return rc;
  if (group_depth > 0) return ncclInvalidUsage;
  // NCCL's in-place form: this rank's input already sits at its place in the output.
  const bool in_place =
      sendbuff == static_cast<const char*>(recvbuff) + std::size_t(comm->rank) * sendcount * size_of(datatype);
  return from_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : sendbuff, int(sendcount), type, recvbuff, int(sendcount),
                                type, comm->mpi));
}

ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;  // nested groups complete with the outermost
  std::vector<Pending> ops;
  ops.swap(group);
  std::vector<MPI_Request> requests(ops.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Pending& p = ops[i];
    const int rc = p.send ? MPI_Issend(p.buffer, p.count, p.type, p.peer, kTag, p.comm, &requests[i])
                          : MPI_Irecv(p.buffer, p.count, p.type, p.peer, kTag, p.comm, &requests[i]);
    if (rc != MPI_SUCCESS) return ncclSystemError;
  }
  return from_mpi(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  *stream = new CUstream_st;
  live_handles.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (live_handles.erase(stream) == 0) return cudaErrorInvalidValue;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  // Every operation completed when its call returned.
  return stream == nullptr || live_handles.count(stream) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned /*flags*/) {
  const bool ok = (stream == nullptr || live_handles.count(stream)) && live_handles.count(event);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned /*flags*/) {
  *event = new CUevent_st;
  live_handles.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (live_handles.erase(event) == 0) return cudaErrorInvalidValue;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const bool ok = live_handles.count(event) && (stream == nullptr || live_handles.count(stream));
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  *ptr = std::malloc(bytes);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind /*kind*/,
                            cudaStream_t stream) {
  if (stream != nullptr && !live_handles.count(stream)) return cudaErrorInvalidValue;
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (stand-in: a destroyed or unknown stream or event)";
    case cudaErrorMemoryAllocation: return "out of memory";
  }
  return "unknown error";
}

}  // namespace foresight::trainer::nccl_standin
