// The NCCL and CUDA-runtime calls the NCCL communicator makes, and nothing more. Compiled one of
// two ways (FORESIGHT_NCCL_STANDIN, set per object library by trainer/CMakeLists.txt): 0 = the
// real <nccl.h> and <cuda_runtime_api.h>; 1 = the same names, types and signatures declared here
// in namespace foresight::trainer::nccl_standin and implemented over MPI for host memory
// (nccl_standin.cpp), so that CI runs the very code that drives NCCL on GPUs. The stand-in keeps
// the semantics correctness depends on (collectives in issue order per communicator, groups that
// complete only as a whole, sends that wait for their receive, pair messages matched in order)
// and leaves out what only speed depends on (streams and events complete on the host at once).
// FORESIGHT_NCCL_FLAVOUR names the namespace the communicator is compiled into.
#pragma once

#ifndef FORESIGHT_NCCL_STANDIN
#error "FORESIGHT_NCCL_STANDIN must be 0 (real NCCL) or 1 (the MPI stand-in): see trainer/CMakeLists.txt"
#endif

#if FORESIGHT_NCCL_STANDIN

#include <cstddef>

#define FORESIGHT_NCCL_FLAVOUR nccl_standin

namespace foresight::trainer::nccl_standin {

// --- NCCL (nccl.h 2.28; enumerator values as there) ---
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5
} ncclResult_t;
// ncclBfloat16 is declared so the communicator compiles unchanged; the stand-in refuses it
// (ncclInvalidArgument): host tensors hold floats, only the CUDA backend packs bf16.
typedef enum { ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
typedef struct ncclConfig ncclConfig_t;  // only ever passed as nullptr (the defaults)

// --- CUDA runtime ---
typedef enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
inline constexpr unsigned cudaStreamNonBlocking = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;

/// ncclGetUniqueId: an id naming the communicator to create, on one rank, passed to the others.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
/// ncclCommInitRank: collective over the `nranks` ranks holding `id` (the stand-in: every rank of
/// MPI_COMM_WORLD, where it checks that all hold the same id and distinct ranks).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
const char* cudaGetErrorString(cudaError_t error);

}  // namespace foresight::trainer::nccl_standin

#else

#include <cuda_runtime_api.h>
#include <nccl.h>

#define FORESIGHT_NCCL_FLAVOUR nccl_real

#endif
