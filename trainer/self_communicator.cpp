#include <cstring>

#include "core/error.hpp"
#include "trainer/communicator.hpp"

namespace foresight::trainer {

namespace {

class Done final : public Request {
 public:
  void wait() override {}
};

void copy_elements(const Tensor& dst, const Tensor& src) {
  FORESIGHT_CHECK(dst.numel() == src.numel()) << dst.numel() << " vs " << src.numel();
  std::memmove(dst.data(), src.data(), std::size_t(src.numel()) * sizeof(float));
}

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* library() const override { return "self"; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
  void all_reduce(Tensor, ReduceOp) override {}
  std::unique_ptr<Request> all_reduce_async(Tensor, ReduceOp) override { return std::make_unique<Done>(); }
  void all_reduce(std::span<double>, ReduceOp) override {}
  void all_gather(Tensor out, const Tensor& in) override { copy_elements(out, in); }
  void reduce_scatter(Tensor out, const Tensor& in, ReduceOp) override { copy_elements(out, in); }
  void all_to_all(Tensor out, const Tensor& in) override { copy_elements(out, in); }
  std::unique_ptr<Request> send(const Tensor&, int peer, int) override {
    FORESIGHT_CHECK(false) << "send to rank " << peer << " in a one-rank group";
    return nullptr;
  }
  void recv(Tensor, int peer, int) override { FORESIGHT_CHECK(false) << "recv from rank " << peer << " in a one-rank group"; }
  void exchange(std::span<const Transfer> batch) override {
    FORESIGHT_CHECK(batch.empty()) << "exchange of " << batch.size() << " messages in a one-rank group";
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace foresight::trainer
