// ZeRO-1's gradient reduction and gradient norm against hand sums: a reduce-scatter of the padded
// buffer (not an all-reduce), each rank's shard summed over the replicas, and the global norm
// assembled from the shards equal to the norm of the whole reduced buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/trainer/host_copy.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/grad_sync.hpp"
#include "trainer/optimizer.hpp"

namespace foresight::trainer {
namespace {

using test::host;

/// A data-parallel group of `size` replicas seen from rank `rank`, where replica q holds (q + 1)
/// times this rank's tensor divided by (rank + 1): collectives are computed from the local tensor
/// alone. Records each call as "name:elements".
class ScaledReplicas final : public Communicator {
 public:
  ScaledReplicas(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* library() const override { return "test"; }
  std::unique_ptr<Communicator> split(int, int) override { return nullptr; }
  // Sum over q of (q + 1) / (rank + 1).
  float factor() const { return float(size_) * float(size_ + 1) / 2.0f / float(rank_ + 1); }
  void all_reduce(Tensor t, ReduceOp) override {
    calls.push_back("all_reduce:" + std::to_string(t.numel()));
    float* p = t.data();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] *= factor();
  }
  std::unique_ptr<Request> all_reduce_async(Tensor t, ReduceOp op) override {
    all_reduce(t, op);
    return nullptr;
  }
  void all_reduce(std::span<double> v, ReduceOp) override { calls.push_back("all_reduce_scalars:" + std::to_string(v.size())); }
  void all_gather(Tensor, const Tensor& in) override { calls.push_back("all_gather:" + std::to_string(in.numel())); }
  void reduce_scatter(Tensor out, const Tensor& in, ReduceOp) override {
    calls.push_back("reduce_scatter:" + std::to_string(in.numel()));
    EXPECT_EQ(in.numel(), out.numel() * size_);
    const float* src = in.data() + out.numel() * rank_;
    float* dst = out.data();
    for (std::int64_t i = 0; i < out.numel(); ++i) dst[i] = src[i] * factor();
  }
  void all_to_all(Tensor, const Tensor&) override { calls.push_back("all_to_all"); }
  std::unique_ptr<Request> send(const Tensor&, int, int) override { return nullptr; }
  void recv(Tensor, int, int) override {}
  void exchange(std::span<const Transfer>) override {}
  void barrier() override {}

  std::vector<std::string> calls;

 private:
  int rank_, size_;
};

// Three parameters of 5, 7 and 3 elements (15): two shards of 8, the second padded by one.
ParamStore three_params(Backend& be, int shards, int shard) {
  ParamStore s(1, 0);
  s.declare({.name = "a", .rows = 1, .cols = 5});
  s.declare({.name = "b", .rows = 7, .cols = 1, .in_grad_norm = false});
  s.declare({.name = "c", .rows = 1, .cols = 3});
  s.allocate(be, 1, shards, shard);
  std::vector<float> g(15);
  for (int i = 0; i < 15; ++i) g[std::size_t(i)] = float(i + 1);  // 1..15
  be.copy_from_host(s.grads(), g);
  return s;
}

TEST(GradSync, ZeroOneReduceScattersThePaddedBuffer) {
  auto be = make_cpu_backend();
  for (int rank = 0; rank < 2; ++rank) {
    ParamStore s = three_params(*be, 2, rank);
    ScaledReplicas dp(rank, 2);
    reduce_scatter_gradients(*be, s, dp);
    // One reduce-scatter of the 16-element padded buffer; nothing all-reduced.
    ASSERT_EQ(dp.calls, std::vector<std::string>{"reduce_scatter:16"});
    // Replica q holds (q + 1) / (rank + 1) x these gradients, so the sum is 3 / (rank + 1) x them.
    const std::vector<float> g = host(*be, s.padded_grads());
    const float f = 3.0f / float(rank + 1);
    for (int i = 0; i < 16; ++i) {
      const float own = i < 15 ? float(i + 1) : 0.0f;
      const bool mine = i / 8 == rank;
      EXPECT_FLOAT_EQ(g[std::size_t(i)], mine ? own * f : own) << "rank " << rank << " element " << i;
    }
  }
}

TEST(GradSync, OneReplicaLeavesTheGradientsAlone) {
  auto be = make_cpu_backend();
  ParamStore s = three_params(*be, 1, 0);
  ScaledReplicas dp(0, 1);
  reduce_scatter_gradients(*be, s, dp);
  EXPECT_TRUE(dp.calls.empty());
}

TEST(GradSync, ShardNormsAddUpToTheFullNorm) {
  auto be = make_cpu_backend();
  // Counted parameters a (1..5) and c (13..15); b (6..12) is left out.
  double hand = 0;
  for (int v : {1, 2, 3, 4, 5, 13, 14, 15}) hand += double(v) * v;
  ScaledReplicas world(0, 1);  // scalar all-reduce: leaves the local sum as it is
  double shard_sq = 0;
  for (int rank = 0; rank < 2; ++rank) {
    ParamStore s = three_params(*be, 2, rank);
    const double n = sharded_grad_norm(*be, s, world);
    shard_sq += n * n;
  }
  EXPECT_NEAR(std::sqrt(shard_sq), std::sqrt(hand), 1e-9 * std::sqrt(hand));
  ParamStore whole = three_params(*be, 1, 0);
  EXPECT_NEAR(global_grad_norm(*be, whole, world, true, true), std::sqrt(hand), 1e-9 * std::sqrt(hand));
}

}  // namespace
}  // namespace foresight::trainer
