#include "trainer/staging_communicator.hpp"

#include <vector>

#include "core/error.hpp"
#include "trainer/cpu_backend.hpp"

namespace foresight::trainer {

namespace {

/// Copies a host result back into the device tensor once the inner request completes; holds the
/// host tensor alive until then.
class StagedRequest final : public Request {
 public:
  StagedRequest(std::unique_ptr<Request> inner, Backend& be, Tensor device, Tensor host, bool copy_back)
      : inner_(std::move(inner)), be_(be), device_(std::move(device)), host_(std::move(host)), copy_back_(copy_back) {}
  // Dropped without wait(): still complete it (as MPI's requests do), or the device tensor would
  // silently keep its pre-collective values.
  ~StagedRequest() override {
    try {
      wait();
    } catch (...) {
    }
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    if (copy_back_) be_.copy_from_host(device_, {host_.data(), std::size_t(host_.numel())});
    done_ = true;
  }

 private:
  std::unique_ptr<Request> inner_;
  Backend& be_;
  Tensor device_, host_;
  bool copy_back_;
  bool done_ = false;
};

class Done final : public Request {
 public:
  void wait() override {}
};

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(Communicator& inner, std::unique_ptr<Communicator> owned, Backend& be)
      : inner_(inner),
        owned_(std::move(owned)),
        be_(be),
        host_(make_cpu_backend()),
        host_bf16_(make_cpu_backend(Precision::bf16)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* library() const override { return "mpi-staged"; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto sub = inner_.split(color, key);
    Communicator& ref = *sub;
    return std::make_unique<StagingCommunicator>(ref, std::move(sub), be_);
  }

  void all_reduce(Tensor t, ReduceOp op) override {
    if (!staged(t)) return inner_.all_reduce(t, op);
    if (size() == 1) return;
    Tensor h = to_host(t);
    inner_.all_reduce(h, op);
    back(t, h);
  }
  std::unique_ptr<Request> all_reduce_async(Tensor t, ReduceOp op) override {
    if (!staged(t)) return inner_.all_reduce_async(t, op);
    if (size() == 1) return std::make_unique<Done>();
    Tensor h = to_host(t);
    auto r = inner_.all_reduce_async(h, op);
    return std::make_unique<StagedRequest>(std::move(r), be_, t, h, true);
  }
  void all_reduce(std::span<double> values, ReduceOp op) override { inner_.all_reduce(values, op); }
  void all_gather(Tensor out, const Tensor& in) override {
    through_host(out, in, [&](Tensor o, const Tensor& i) { inner_.all_gather(o, i); });
  }
  void reduce_scatter(Tensor out, const Tensor& in, ReduceOp op) override {
    through_host(out, in, [&](Tensor o, const Tensor& i) { inner_.reduce_scatter(o, i, op); });
  }
  void all_to_all(Tensor out, const Tensor& in) override {
    through_host(out, in, [&](Tensor o, const Tensor& i) { inner_.all_to_all(o, i); });
  }
  std::unique_ptr<Request> send(const Tensor& t, int peer, int tag) override {
    if (!staged(t)) return inner_.send(t, peer, tag);
    // The host copy is taken now, so the caller may reuse the device tensor at once.
    Tensor h = to_host(t);
    auto r = inner_.send(h, peer, tag);
    return std::make_unique<StagedRequest>(std::move(r), be_, Tensor{}, h, false);  // device copy not needed
  }
  void recv(Tensor t, int peer, int tag) override {
    if (!staged(t)) return inner_.recv(t, peer, tag);
    Tensor h = host_like(t);
    inner_.recv(h, peer, tag);
    back(t, h);
  }
  void exchange(std::span<const Transfer> batch) override {
    // Host copies of the device tensors: sends copied out before, receives copied back after.
    std::vector<Transfer> host(batch.begin(), batch.end());
    for (Transfer& x : host)
      if (staged(x.tensor))
        x.tensor = x.kind == Transfer::Kind::send ? to_host(x.tensor) : host_like(x.tensor);
    inner_.exchange(host);
    for (std::size_t i = 0; i < host.size(); ++i)
      if (batch[i].kind == Transfer::Kind::recv && staged(batch[i].tensor)) {
        Tensor t = batch[i].tensor;
        back(t, host[i].tensor);
      }
  }
  void barrier() override { inner_.barrier(); }

 private:
  static bool staged(const Tensor& t) { return t.defined() && t.device() == Device::cuda; }
  /// A host tensor of t's shape and element type. A bf16 device tensor (packed 2-byte bf16 on the
  /// CUDA backend) is staged as a host bf16 tensor, floats holding bf16 values: the backend's
  /// copy_to_host widens each element exactly, the inner communicator rounds what it reduces
  /// into it (as for the CPU backend's bf16 tensors), and copy_from_host packs it back (exactly,
  /// the values being bf16 already).
  Tensor host_like(const Tensor& t) {
    Backend& host = t.element_type() == ElementType::bf16 ? *host_bf16_ : *host_;
    return host.zeros(t.rows(), t.cols());
  }
  Tensor to_host(const Tensor& t) {
    if (!staged(t)) return t;
    Tensor h = host_like(t);
    be_.copy_to_host({h.data(), std::size_t(h.numel())}, t);
    return h;
  }
  void back(Tensor& t, const Tensor& h) {
    if (staged(t))
      be_.copy_from_host(t, {h.data(), std::size_t(h.numel())});
    else
      host_->copy(t, h);
  }
  /// An out-of-place collective `call(out, in)` of the inner communicator on host copies; in a
  /// one-rank group each of them (all-gather, reduce-scatter, all-to-all) is a copy of `in`.
  template <class Call>
  void through_host(Tensor out, const Tensor& in, Call&& call) {
    if (!staged(out) && !staged(in)) return call(out, in);
    if (size() == 1) return device_copy(out, in);
    Tensor ho = host_like(out);
    call(ho, to_host(in));
    back(out, ho);
  }
  void device_copy(Tensor out, const Tensor& in) {
    FORESIGHT_CHECK(out.numel() == in.numel()) << out.numel() << " vs " << in.numel();
    Tensor o = out.reshaped(in.rows(), in.cols());
    if (staged(o) && staged(in))
      be_.copy(o, in);
    else
      back(o, to_host(in));
  }

  Communicator& inner_;
  std::unique_ptr<Communicator> owned_;
  Backend& be_;
  std::unique_ptr<Backend> host_;       // fp32 staging tensors
  std::unique_ptr<Backend> host_bf16_;  // bf16 staging tensors (zeros() of the bf16 recipe)
};

}  // namespace

std::unique_ptr<Communicator> make_staging_communicator(Communicator& inner, Backend& device) {
  return std::make_unique<StagingCommunicator>(inner, nullptr, device);
}

}  // namespace foresight::trainer
