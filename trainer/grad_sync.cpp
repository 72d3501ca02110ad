#include "trainer/grad_sync.hpp"

#include "core/error.hpp"

namespace foresight::trainer {

GradientReducer::GradientReducer(const ParamStore& store, Communicator& dp, std::int64_t bucket_elements,
                                 bool experts)
    : store_(store), dp_(dp), bucket_of_(std::size_t(store.size()), -1) {
  // Backward produces gradients roughly from the end of the buffer to its start.
  bool gap = false;  // a parameter left out breaks the contiguous range: start a new bucket
  for (int i = store.size() - 1; i >= 0; --i) {
    const Param& p = store[i];
    if (p.decl.expert != experts) {
      gap = true;
      continue;
    }
    const std::int64_t n = p.value.numel();
    if (buckets_.empty() || buckets_.back().count >= bucket_elements || gap) buckets_.push_back(Bucket{});
    gap = false;
    Bucket& b = buckets_.back();
    FORESIGHT_CHECK(b.count == 0 || p.offset + n == b.first) << "parameters not contiguous at " << p.decl.name;
    b.first = p.offset;
    b.count += n;
    ++b.params;
    bucket_of_[std::size_t(i)] = int(buckets_.size()) - 1;
  }
  for (Bucket& b : buckets_) b.pending = b.params;
}

void GradientReducer::launch(Bucket& b) {
  if (dp_.size() > 1) b.request = dp_.all_reduce_async(store_.grads().row_slice(b.first, b.count), ReduceOp::sum);
}

void GradientReducer::mark_ready(int index) {
  if (bucket_of_[std::size_t(index)] < 0) return;
  Bucket& b = buckets_[std::size_t(bucket_of_[std::size_t(index)])];
  FORESIGHT_CHECK(b.pending > 0) << store_[index].decl.name << " marked ready twice";
  if (--b.pending == 0) launch(b);
}

void GradientReducer::finish() {
  for (Bucket& b : buckets_) {
    if (b.pending > 0) launch(b);
    if (b.request) b.request->wait();
    b.request.reset();
    b.pending = b.params;
  }
}

void reduce_scatter_gradients(Backend& be, const ParamStore& store, Communicator& dp) {
  if (dp.size() == 1) return;
  FORESIGHT_CHECK(store.padded_grads().numel() == store.shard_elements() * dp.size())
      << "gradient buffer of " << store.padded_grads().numel() << " elements is not " << dp.size() << " shards of "
      << store.shard_elements() << " (allocate with as many shards as data-parallel ranks)";
  // Into a separate shard: MPI's reduce-scatter may not write into its own input.
  Tensor mine = be.zeros_fp32(store.shard_elements(), 1);
  dp.reduce_scatter(mine, store.padded_grads(), ReduceOp::sum);
  be.copy(store.padded_grads().row_slice(store.state_first(), store.shard_elements()), mine);
}

}  // namespace foresight::trainer
