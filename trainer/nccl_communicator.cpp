// Communicator on NCCL (see nccl_communicator.hpp), written against nccl_api.hpp only and
// compiled twice: into namespace nccl_real against NCCL and the CUDA runtime, and into namespace
// nccl_standin against the MPI stand-in (FORESIGHT_NCCL_STANDIN, set by trainer/CMakeLists.txt).
//
// Stream discipline (every call): record `ready_` on the compute stream and make the
// communication stream wait for it, so NCCL reads what the compute stream wrote and writes only
// after the compute stream is done with the memory (the backend's allocator reuses freed blocks
// in compute-stream order); queue the NCCL call(s) on the communication stream; record a `done`
// event there. A Request's wait() makes the compute stream wait for `done` and does not block the
// host: the caller's next backend op is ordered after the collective, the host runs ahead. The
// blocking calls are that plus an immediate wait(). Host doubles (losses, norms) go through a
// device scratch buffer and do block the host until they are back.
#include "trainer/nccl_api.hpp"
#include "trainer/precision.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "trainer/nccl_communicator.hpp"

namespace foresight::trainer::FORESIGHT_NCCL_FLAVOUR {

namespace {

// Real NCCL needs device memory; the stand-in works on host memory (whatever the tensor says:
// the cpu-staged backend labels host buffers as device ones).
constexpr bool kDeviceTensors = FORESIGHT_NCCL_STANDIN == 0;

void nccl_check(ncclResult_t rc, const char* call) {
  if (rc == ncclSuccess) return;
  std::string what = call;  // appended piecewise: g++ 12 warns falsely (-Wrestrict) on + chains
  what += " failed: ";
  what += ncclGetErrorString(rc);
  throw InternalError(what);
}
void cuda_check(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  std::string what = call;
  what += " failed: ";
  what += cudaGetErrorString(rc);
  throw InternalError(what);
}
// The one checking wrapper per library (STYLE.md 6), naming the call.
#define FORESIGHT_NCCL_CALL(call) nccl_check((call), #call)
#define FORESIGHT_CUDA_CALL(call) cuda_check((call), #call)

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

/// A tensor's elements as NCCL takes them: the address of the first, the count in elements, and
/// the NCCL type of their storage. Packed bf16 (the CUDA backend's bf16 tensors) goes as
/// ncclBfloat16: NCCL then reduces in bf16 arithmetic, rounding each partial sum (the MPI path
/// sums floats and rounds once). The CPU backend's bf16 tensors hold floats and go as ncclFloat32
/// (the stand-in, then rounded once like the MPI communicator's results).
struct Elements {
  void* data;
  std::size_t count;
  ncclDataType_t type;
  std::size_t bytes_each;
  /// The address of element i.
  void* at(std::size_t i) const { return static_cast<char*>(data) + i * bytes_each; }
};

Elements elements_of(const Tensor& t, const char* call) {
  FORESIGHT_CHECK(t.defined()) << call << " of an undefined tensor";
  FORESIGHT_CHECK(!kDeviceTensors || t.device() == Device::cuda) << call << " over NCCL needs a CUDA tensor";
  const bool packed = t.storage() == Storage::packed_bf16;
  return Elements{t.raw(), std::size_t(t.numel()), packed ? ncclBfloat16 : ncclFloat32, t.element_bytes()};
}

/// Out-of-place collectives move elements between two tensors of one storage.
void check_same_storage(const Elements& a, const Elements& b, const char* call) {
  FORESIGHT_CHECK(a.type == b.type) << call << ": input and output tensors of different storage types";
}

/// A CUDA event without timing (the cheap kind), destroyed with its owner.
class Event {
 public:
  Event() { FORESIGHT_CUDA_CALL(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() {
    if (event_) cudaEventDestroy(event_);  // released by CUDA once the recorded work completes
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Work queued on a communication stream; wait() orders the compute stream after it and lets the
/// buffers go (later uses of their memory are compute-stream work, hence after it too).
class NcclRequest final : public Request {
 public:
  NcclRequest(cudaStream_t compute, std::unique_ptr<Event> done, std::vector<std::shared_ptr<Buffer>> keep)
      : compute_(compute), done_(std::move(done)), keep_(std::move(keep)) {}
  // Dropped without wait(): still order the compute stream after it, or a later op could read the
  // tensor before the collective wrote it.
  ~NcclRequest() override {
    try {
      wait();
    } catch (...) {
    }
  }
  void wait() override {
    if (!done_) return;
    FORESIGHT_CUDA_CALL(cudaStreamWaitEvent(compute_, done_->get(), 0));
    done_.reset();
    keep_.clear();
  }

 private:
  cudaStream_t compute_;
  std::unique_ptr<Event> done_;
  std::vector<std::shared_ptr<Buffer>> keep_;
};

class NcclCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm`; `compute` is the backend's stream (not owned).
  NcclCommunicator(ncclComm_t comm, cudaStream_t compute) : comm_(comm), compute_(compute) {
    FORESIGHT_NCCL_CALL(ncclCommUserRank(comm_, &rank_));
    FORESIGHT_NCCL_CALL(ncclCommCount(comm_, &size_));
    FORESIGHT_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);  // nothing of this communicator may still be queued
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* library() const override { return FORESIGHT_NCCL_STANDIN ? "nccl-standin" : "nccl"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t c = nullptr;
    FORESIGHT_NCCL_CALL(ncclCommSplit(comm_, color, key, &c, nullptr));
    return std::make_unique<NcclCommunicator>(c, compute_);
  }

  void all_reduce(Tensor t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }
  std::unique_ptr<Request> all_reduce_async(Tensor t, ReduceOp op) override {
    const Elements e = elements_of(t, "all_reduce");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclAllReduce(e.data, e.data, e.count, e.type, to_nccl(op), comm_, stream_));
    // The stand-in has finished by now (host memory): a bf16 result is rounded once, as the MPI
    // communicator does.
    if (!kDeviceTensors) round_if_bf16(t);
    return completion({t.buffer()});
  }
  void all_reduce(std::span<double> values, ReduceOp op) override {
    if (values.empty()) return;
    const std::size_t bytes = values.size() * sizeof(double);
    if (scratch_bytes_ < bytes) {
      if (scratch_) FORESIGHT_CUDA_CALL(cudaFree(scratch_));
      scratch_ = nullptr;
      FORESIGHT_CUDA_CALL(cudaMalloc(&scratch_, bytes));
      scratch_bytes_ = bytes;
    }
    // Host values: no compute-stream work to wait for; the host waits for the result.
    FORESIGHT_CUDA_CALL(cudaMemcpyAsync(scratch_, values.data(), bytes, cudaMemcpyHostToDevice, stream_));
    FORESIGHT_NCCL_CALL(ncclAllReduce(scratch_, scratch_, values.size(), ncclFloat64, to_nccl(op), comm_, stream_));
    FORESIGHT_CUDA_CALL(cudaMemcpyAsync(values.data(), scratch_, bytes, cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA_CALL(cudaStreamSynchronize(stream_));
  }
  void all_gather(Tensor out, const Tensor& in) override {
    FORESIGHT_CHECK(out.numel() == in.numel() * size_) << out.numel() << " vs " << in.numel() << " x " << size_;
    const Elements src = elements_of(in, "all_gather"), dst = elements_of(out, "all_gather");
    check_same_storage(src, dst, "all_gather");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclAllGather(src.data, dst.data, src.count, src.type, comm_, stream_));
    completion({in.buffer(), out.buffer()})->wait();
  }
  void reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    FORESIGHT_CHECK(in.numel() == out.numel() * size_) << in.numel() << " vs " << out.numel() << " x " << size_;
    const Elements src = elements_of(in, "reduce_scatter"), dst = elements_of(out, "reduce_scatter");
    check_same_storage(src, dst, "reduce_scatter");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclReduceScatter(src.data, dst.data, dst.count, dst.type, to_nccl(op), comm_, stream_));
    completion({in.buffer(), out.buffer()})->wait();
    if (!kDeviceTensors) round_if_bf16(out);
  }
  void all_to_all(Tensor out, const Tensor& in) override {
    // NCCL has no all-to-all: one grouped send and receive per peer (NCCL's documented recipe).
    FORESIGHT_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0) << in.numel() << " / " << size_;
    const std::size_t chunk = std::size_t(in.numel() / size_);
    const Elements src = elements_of(in, "all_to_all"), dst = elements_of(out, "all_to_all");
    check_same_storage(src, dst, "all_to_all");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclGroupStart());
    for (int p = 0; p < size_; ++p) {  // chunk p starts chunk * p elements in (bytes per the storage)
      FORESIGHT_NCCL_CALL(ncclSend(src.at(std::size_t(p) * chunk), chunk, src.type, p, comm_, stream_));
      FORESIGHT_NCCL_CALL(ncclRecv(dst.at(std::size_t(p) * chunk), chunk, dst.type, p, comm_, stream_));
    }
    FORESIGHT_NCCL_CALL(ncclGroupEnd());
    completion({in.buffer(), out.buffer()})->wait();
  }
  std::unique_ptr<Request> send(const Tensor& t, int peer, int /*tag: NCCL has none*/) override {
    const Elements e = elements_of(t, "send");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclSend(e.data, e.count, e.type, peer, comm_, stream_));
    return completion({t.buffer()});
  }
  void recv(Tensor t, int peer, int /*tag*/) override {
    const Elements e = elements_of(t, "recv");
    after_compute();
    FORESIGHT_NCCL_CALL(ncclRecv(e.data, e.count, e.type, peer, comm_, stream_));
    completion({t.buffer()})->wait();
  }
  void exchange(std::span<const Transfer> batch) override {
    if (batch.empty()) return;
    std::vector<std::shared_ptr<Buffer>> keep;
    after_compute();
    FORESIGHT_NCCL_CALL(ncclGroupStart());
    for (const Transfer& x : batch) {
      const Elements e = elements_of(x.tensor, "exchange");
      if (x.kind == Transfer::Kind::send)
        FORESIGHT_NCCL_CALL(ncclSend(e.data, e.count, e.type, x.peer, comm_, stream_));
      else
        FORESIGHT_NCCL_CALL(ncclRecv(e.data, e.count, e.type, x.peer, comm_, stream_));
      keep.push_back(x.tensor.buffer());
    }
    FORESIGHT_NCCL_CALL(ncclGroupEnd());
    completion(std::move(keep))->wait();
  }
  void barrier() override {
    // NCCL has no barrier: a one-element all-reduce the host waits for.
    double one[1] = {0};
    all_reduce(one, ReduceOp::sum);
  }

 private:
  /// The communication stream waits for everything queued on the compute stream so far.
  void after_compute() {
    FORESIGHT_CUDA_CALL(cudaEventRecord(ready_.get(), compute_));
    FORESIGHT_CUDA_CALL(cudaStreamWaitEvent(stream_, ready_.get(), 0));
  }
  /// A request completing with what was just queued on the communication stream.
  std::unique_ptr<Request> completion(std::vector<std::shared_ptr<Buffer>> keep) {
    auto done = std::make_unique<Event>();
    FORESIGHT_CUDA_CALL(cudaEventRecord(done->get(), stream_));
    return std::make_unique<NcclRequest>(compute_, std::move(done), std::move(keep));
  }

  ncclComm_t comm_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  Event ready_;  // re-recorded by every call; a wait captures the event as it is at that moment
  int rank_ = 0, size_ = 1;
  void* scratch_ = nullptr;  // device doubles for the host all-reduce
  std::size_t scratch_bytes_ = 0;
};

}  // namespace

NcclUniqueIdBytes unique_id() {
  ncclUniqueId id;
  FORESIGHT_NCCL_CALL(ncclGetUniqueId(&id));
  NcclUniqueIdBytes bytes;
  static_assert(sizeof(id.internal) == std::tuple_size_v<NcclUniqueIdBytes>, "NCCL_UNIQUE_ID_BYTES changed");
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

std::unique_ptr<Communicator> init_rank(const NcclUniqueIdBytes& bytes, int nranks, int rank, void* compute_stream) {
  ncclUniqueId id;
  std::memcpy(id.internal, bytes.data(), bytes.size());
  ncclComm_t comm = nullptr;
  FORESIGHT_NCCL_CALL(ncclCommInitRank(&comm, nranks, id, rank));
  return std::make_unique<NcclCommunicator>(comm, static_cast<cudaStream_t>(compute_stream));
}

int current_device() {
  int device = 0;
  FORESIGHT_CUDA_CALL(cudaGetDevice(&device));
  return device;
}

#undef FORESIGHT_NCCL_CALL
#undef FORESIGHT_CUDA_CALL

}  // namespace foresight::trainer::FORESIGHT_NCCL_FLAVOUR
