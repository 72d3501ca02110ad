// Data-parallel gradient all-reduce in buckets, launched while the backward of the last
// micro-batch still runs (PyTorch DDP's scheme, Li et al. 2020 sec. 3.2.3): parameters are grouped
// into contiguous ranges of the flat gradient buffer, in backward order, and a bucket's
// all-reduce starts as soon as every parameter in it has its final gradient. The loss is already
// scaled by 1/(global batch tokens), so summing over replicas gives the single-rank mean.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/communicator.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {

class GradientReducer {
 public:
  /// `bucket_elements`: target elements per bucket (a parameter is never split). Only parameters
  /// with `ParamDecl::expert == experts` are reduced here (MoE experts sum over another group).
  GradientReducer(const ParamStore& store, Communicator& dp, std::int64_t bucket_elements, bool experts = false);

  /// Parameter `index` has its final gradient for this step; may launch its bucket's all-reduce
  /// (ignored for a parameter this reducer does not handle).
  void mark_ready(int index);
  /// Waits for every bucket (launching any not yet launched) and resets for the next step.
  void finish();
  int buckets() const { return int(buckets_.size()); }

 private:
  struct Bucket {
    std::int64_t first = 0, count = 0;  // range of the flat gradient buffer
    int pending = 0;                    // parameters still to be marked this step
    int params = 0;
    std::unique_ptr<Request> request;
  };
  void launch(Bucket& b);

  const ParamStore& store_;
  Communicator& dp_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index -> bucket
};

/// ZeRO-1's gradient reduction (the distributed optimizer: Rajbhandari et al. 2020 sec. 5.1,
/// Megatron-LM's --use-distributed-optimizer). A data-parallel rank steps only its own shard of the
/// flat buffer, so it needs the summed gradients of that shard only: one reduce-scatter of the padded
/// gradient buffer over `dp` replaces the all-reduce, (n-1)/n of the buffer on the wire instead of
/// 2(n-1)/n. Afterwards elements [state_first(), state_first() + shard_elements()) hold the sums;
/// the rest of the buffer holds this rank's own, unreduced gradients and must not be read.
/// The reduction runs after the backward (the trainer does not overlap it), as one collective: the
/// shards cut the buffer at other places than the buckets do.
void reduce_scatter_gradients(Backend& be, const ParamStore& store, Communicator& dp);

}  // namespace foresight::trainer
