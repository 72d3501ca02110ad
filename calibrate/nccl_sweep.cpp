#include "calibrate/nccl_sweep.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <numeric>

#include "kernels/cuda_check.hpp"

namespace foresight::calibrate {

namespace {

#define FORESIGHT_NCCL(call)                                                                                   \
  do {                                                                                                         \
    const ncclResult_t foresight_nccl_status_ = (call);                                                        \
    if (foresight_nccl_status_ != ncclSuccess)                                                                 \
      throw kernels::CudaError(std::string(#call) + " failed at " + __FILE__ + ":" + std::to_string(__LINE__) + \
                               ": " + ncclGetErrorString(foresight_nccl_status_));                             \
  } while (0)

enum class Coll { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all };
constexpr Coll kColls[] = {Coll::all_reduce, Coll::all_gather, Coll::reduce_scatter, Coll::broadcast, Coll::all_to_all};

const char* name_of(Coll c) {
  switch (c) {
    case Coll::all_reduce: return "nccl_all_reduce";
    case Coll::all_gather: return "nccl_all_gather";
    case Coll::reduce_scatter: return "nccl_reduce_scatter";
    case Coll::broadcast: return "nccl_broadcast";
    case Coll::all_to_all: return "nccl_all_to_all";
  }
  return "";
}

/// nccl-tests' bus bandwidth factor (PERFORMANCE.md there): what each link carries relative to
/// the algorithm bandwidth bytes / time.
double bus_factor(Coll c, int g) {
  switch (c) {
    case Coll::all_reduce: return 2.0 * (g - 1) / g;
    case Coll::broadcast: return 1.0;
    default: return double(g - 1) / g;
  }
}

struct Group {
  int g = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<void*> send, recv;
  cudaEvent_t start = nullptr, stop = nullptr;  // on rank 0's device
  ~Group() {
    for (int r = 0; r < g; ++r) {
      cudaSetDevice(r);
      if (r < int(send.size())) cudaFree(send[r]);
      if (r < int(recv.size())) cudaFree(recv[r]);
      if (r < int(streams.size())) cudaStreamDestroy(streams[r]);
      if (r < int(comms.size())) ncclCommDestroy(comms[r]);
    }
    cudaSetDevice(0);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

// `bytes` is the size nccl-tests reports: the reduced buffer (all-reduce, broadcast), the gathered
// output (all-gather), the input (reduce-scatter), or each rank's whole send buffer (all-to-all).
void launch(Group& G, Coll c, std::size_t bytes) {
  const std::size_t count = bytes / 2;  // bf16 elements
  const std::size_t per_rank = count / G.g;
  FORESIGHT_NCCL(ncclGroupStart());
  for (int r = 0; r < G.g; ++r) {
    auto* s = static_cast<char*>(G.send[r]);
    auto* d = static_cast<char*>(G.recv[r]);
    switch (c) {
      case Coll::all_reduce:
        FORESIGHT_NCCL(ncclAllReduce(s, d, count, ncclBfloat16, ncclSum, G.comms[r], G.streams[r]));
        break;
      case Coll::all_gather:
        FORESIGHT_NCCL(ncclAllGather(s, d, per_rank, ncclBfloat16, G.comms[r], G.streams[r]));
        break;
      case Coll::reduce_scatter:
        FORESIGHT_NCCL(ncclReduceScatter(s, d, per_rank, ncclBfloat16, ncclSum, G.comms[r], G.streams[r]));
        break;
      case Coll::broadcast:
        FORESIGHT_NCCL(ncclBroadcast(s, d, count, ncclBfloat16, 0, G.comms[r], G.streams[r]));
        break;
      case Coll::all_to_all:
        for (int p = 0; p < G.g; ++p) {
          FORESIGHT_NCCL(ncclSend(s + p * per_rank * 2, per_rank, ncclBfloat16, p, G.comms[r], G.streams[r]));
          FORESIGHT_NCCL(ncclRecv(d + p * per_rank * 2, per_rank, ncclBfloat16, p, G.comms[r], G.streams[r]));
        }
        break;
    }
  }
  FORESIGHT_NCCL(ncclGroupEnd());
}

void sync_all(Group& G) {
  for (int r = 0; r < G.g; ++r) {
    FORESIGHT_CUDA(cudaSetDevice(r));
    FORESIGHT_CUDA(cudaStreamSynchronize(G.streams[r]));
  }
  FORESIGHT_CUDA(cudaSetDevice(0));
}

}  // namespace

std::vector<Measurement> nccl_sweep(int gpus, bool quick, const ProgressFn& progress, std::vector<std::string>& skipped,
                                    std::string& nccl_version) {
  int v = 0;
  FORESIGHT_NCCL(ncclGetVersion(&v));
  nccl_version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  if (gpus < 2) {
    skipped.push_back("nccl: this machine has one GPU; collectives need at least two, none measured");
    return {};
  }
  const std::size_t max_bytes = quick ? (std::size_t(64) << 20) : (std::size_t(1) << 30);
  std::vector<std::size_t> sizes;
  for (std::size_t b = 8; b <= max_bytes; b *= 4) sizes.push_back(b);
  if (sizes.back() != max_bytes) sizes.push_back(max_bytes);
  std::vector<Measurement> out;
  for (int g = 2; g <= gpus; ++g) {
    Group G;
    G.g = g;
    G.comms.resize(g);
    std::vector<int> devs(g);
    std::iota(devs.begin(), devs.end(), 0);
    FORESIGHT_NCCL(ncclCommInitAll(G.comms.data(), g, devs.data()));
    for (int r = 0; r < g; ++r) {
      FORESIGHT_CUDA(cudaSetDevice(r));
      cudaStream_t s;
      FORESIGHT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      G.streams.push_back(s);
      void *a = nullptr, *b = nullptr;
      FORESIGHT_CUDA(cudaMalloc(&a, max_bytes));
      FORESIGHT_CUDA(cudaMalloc(&b, max_bytes));
      FORESIGHT_CUDA(cudaMemset(a, 0, max_bytes));  // bf16 zeros: finite sums
      G.send.push_back(a);
      G.recv.push_back(b);
    }
    FORESIGHT_CUDA(cudaSetDevice(0));
    FORESIGHT_CUDA(cudaEventCreate(&G.start));
    FORESIGHT_CUDA(cudaEventCreate(&G.stop));
    for (Coll c : kColls) {
      const std::string stage = std::string(name_of(c)).substr(5) + " x" + std::to_string(g);
      int done = 0;
      for (std::size_t bytes : sizes) {
        if (progress) progress("nccl " + stage, done++, int(sizes.size()));
        const std::size_t per_rank = bytes / 2 / g;
        if (c != Coll::all_reduce && c != Coll::broadcast && per_rank == 0) continue;
        const std::size_t used = (c == Coll::all_reduce || c == Coll::broadcast) ? bytes : per_rank * g * 2;
        for (int w = 0; w < 3; ++w) launch(G, c, used);
        sync_all(G);
        // Events on rank 0: its part of a collective cannot finish before every rank has joined.
        std::vector<double> t;
        double spent = 0;
        while (int(t.size()) < 5 || (spent < 0.1 && t.size() < 30)) {
          FORESIGHT_CUDA(cudaEventRecord(G.start, G.streams[0]));
          launch(G, c, used);
          FORESIGHT_CUDA(cudaEventRecord(G.stop, G.streams[0]));
          sync_all(G);
          float ms = 0;
          FORESIGHT_CUDA(cudaEventElapsedTime(&ms, G.start, G.stop));
          t.push_back(ms * 1e-3);
          spent += ms * 1e-3;
        }
        Measurement m;
        m.kernel = name_of(c);
        m.impl = "nccl";
        m.shape = {{"bytes", double(used)}, {"ranks", g}, {"nodes", 1}};
        m.timing = summarize(t);
        const double algbw = double(used) / m.timing.median_s / 1e9;
        m.shape["algbw_GBps"] = algbw;
        m.GBps = algbw * bus_factor(c, g);  // bus bandwidth
        out.push_back(std::move(m));
      }
    }
  }
  return out;
}

}  // namespace foresight::calibrate
