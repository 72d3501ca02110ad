#include "trainer/mpi_communicator.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "trainer/precision.hpp"

namespace foresight::trainer {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw InternalError(std::string(call) + " failed: " + std::string(text, std::size_t(len)));
}

namespace {

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

float* host_data(const Tensor& t, const char* call) {
  FORESIGHT_CHECK(t.device() == Device::host) << call << " needs a host tensor (stage device tensors first)";
  return t.data();
}

int count_of(const Tensor& t) {
  FORESIGHT_CHECK(t.numel() <= 2147483647) << "message of " << t.numel() << " elements exceeds MPI's int count";
  return int(t.numel());
}

class MpiRequest final : public Request {
 public:
  /// `reduced`: the tensor an all-reduce wrote, rounded on completion when it is bf16.
  MpiRequest(MPI_Request r, std::shared_ptr<Buffer> keep, Tensor reduced = Tensor{})
      : request_(r), keep_(std::move(keep)), reduced_(std::move(reduced)) {}
  ~MpiRequest() override {
    // A request dropped without wait() would leave MPI writing into freed memory.
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) mpi_check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    keep_.reset();
    round_if_bf16(reduced_);
    reduced_ = Tensor{};
  }

 private:
  MPI_Request request_;
  std::shared_ptr<Buffer> keep_;
  Tensor reduced_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* library() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c;
    mpi_check(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(c, true);
  }
  // A bf16 tensor travels as floats holding bf16 values; the reduction sums them in fp32 and the
  // result is rounded to bf16 once, at the end (NCCL rounds after every hop of its ring, which over
  // two ranks is the same thing).
  void all_reduce(Tensor t, ReduceOp op) override {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, host_data(t, "all_reduce"), count_of(t), MPI_FLOAT, to_mpi(op), comm_),
              "MPI_Allreduce");
    round_if_bf16(t);
  }
  std::unique_ptr<Request> all_reduce_async(Tensor t, ReduceOp op) override {
    MPI_Request r;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, host_data(t, "all_reduce_async"), count_of(t), MPI_FLOAT, to_mpi(op),
                             comm_, &r),
              "MPI_Iallreduce");
    return std::make_unique<MpiRequest>(r, t.buffer(), t);
  }
  void all_reduce(std::span<double> values, ReduceOp op) override {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, to_mpi(op), comm_),
              "MPI_Allreduce");
  }
  void all_gather(Tensor out, const Tensor& in) override {
    FORESIGHT_CHECK(out.numel() == in.numel() * size_) << out.numel() << " vs " << in.numel() << " x " << size_;
    mpi_check(MPI_Allgather(host_data(in, "all_gather"), count_of(in), MPI_FLOAT, host_data(out, "all_gather"),
                            count_of(in), MPI_FLOAT, comm_),
              "MPI_Allgather");
  }
  void reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    FORESIGHT_CHECK(in.numel() == out.numel() * size_) << in.numel() << " vs " << out.numel() << " x " << size_;
    mpi_check(MPI_Reduce_scatter_block(host_data(in, "reduce_scatter"), host_data(out, "reduce_scatter"),
                                       count_of(out), MPI_FLOAT, to_mpi(op), comm_),
              "MPI_Reduce_scatter_block");
    round_if_bf16(out);
  }
  void all_to_all(Tensor out, const Tensor& in) override {
    FORESIGHT_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0) << in.numel() << " / " << size_;
    const int chunk = int(in.numel() / size_);
    mpi_check(MPI_Alltoall(host_data(in, "all_to_all"), chunk, MPI_FLOAT, host_data(out, "all_to_all"), chunk,
                           MPI_FLOAT, comm_),
              "MPI_Alltoall");
  }
  std::unique_ptr<Request> send(const Tensor& t, int peer, int tag) override {
    MPI_Request r;
    mpi_check(MPI_Isend(host_data(t, "send"), count_of(t), MPI_FLOAT, peer, tag, comm_, &r), "MPI_Isend");
    return std::make_unique<MpiRequest>(r, t.buffer());
  }
  void recv(Tensor t, int peer, int tag) override {
    mpi_check(MPI_Recv(host_data(t, "recv"), count_of(t), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE),
              "MPI_Recv");
  }
  void exchange(std::span<const Transfer> batch) override {
    std::vector<MPI_Request> requests(batch.size(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Transfer& x = batch[i];
      if (x.kind == Transfer::Kind::send)
        mpi_check(MPI_Isend(host_data(x.tensor, "exchange"), count_of(x.tensor), MPI_FLOAT, x.peer, x.tag, comm_,
                            &requests[i]),
                  "MPI_Isend");
      else
        mpi_check(MPI_Irecv(host_data(x.tensor, "exchange"), count_of(x.tensor), MPI_FLOAT, x.peer, x.tag, comm_,
                            &requests[i]),
                  "MPI_Irecv");
    }
    mpi_check(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  void barrier() override { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool owned) {
  return std::make_unique<MpiCommunicator>(comm, owned);
}

MPI_Comm mpi_comm_of(const Communicator& c) {
  const auto* m = dynamic_cast<const MpiCommunicator*>(&c);
  FORESIGHT_CHECK(m != nullptr) << "a " << c.library() << " communicator where an MPI one was expected";
  return m->handle();
}

}  // namespace foresight::trainer
