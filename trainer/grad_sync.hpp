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

}  // namespace foresight::trainer
