// Activation offload: the saved tensors leave the backend's memory and come back bit for bit,
// and the bytes counted are the tensors' sizes (counted here by hand from the shapes).
#include <gtest/gtest.h>

#include <vector>

#include "tests/trainer/host_copy.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/offload.hpp"

namespace foresight::trainer {
namespace {

Tensor filled(Backend& be, std::int64_t rows, std::int64_t cols, float first) {
  Tensor t = be.zeros(rows, cols);
  std::vector<float> v(std::size_t(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = first + 0.37f * float(i);
  be.copy_from_host(t, v);
  return t;
}

using test::host;

TEST(Offload, LayersRoundToNearest) {
  EXPECT_EQ(offloaded_layers(0.0, 4), 0);
  EXPECT_EQ(offloaded_layers(0.5, 2), 1);
  EXPECT_EQ(offloaded_layers(0.3, 4), 1);  // 1.2
  EXPECT_EQ(offloaded_layers(0.4, 4), 2);  // 1.6
  EXPECT_EQ(offloaded_layers(1.0, 3), 3);
}

TEST(Offload, RoundTripFreesBackendMemoryAndCountsBytes) {
  auto be = make_cpu_backend();
  LayerActivations a;
  a.x = filled(*be, 4, 8, 1.0f);    // 32 floats
  a.qkv = filled(*be, 4, 24, 2.0f); // 96 floats
  a.fc1 = filled(*be, 4, 32, 3.0f); // 128 floats
  a.out = filled(*be, 4, 8, 4.0f);  // not saved: the backward does not read it
  const std::vector<float> x = host(*be, a.x), qkv = host(*be, a.qkv), fc1 = host(*be, a.fc1);
  const std::int64_t before = be->bytes_in_use();

  ActivationOffload off;
  off.offload(*be, 7, a);
  EXPECT_TRUE(off.holds(7));
  EXPECT_FALSE(a.x.defined());
  EXPECT_FALSE(a.qkv.defined());
  EXPECT_FALSE(a.out.defined());
  EXPECT_EQ(off.host_bytes(), (32 + 96 + 128) * 4);
  EXPECT_EQ(off.bytes_moved(), (32 + 96 + 128) * 4);
  // Everything the layer held, out included, left the backend.
  EXPECT_EQ(be->bytes_in_use(), before - (32 + 96 + 128 + 32) * 4);

  off.restore(*be, 7, a);
  EXPECT_FALSE(off.holds(7));
  EXPECT_EQ(off.host_bytes(), 0);
  EXPECT_EQ(off.bytes_moved(), 2 * (32 + 96 + 128) * 4);
  EXPECT_FALSE(a.probs.defined());  // undefined before, undefined after
  ASSERT_EQ(a.qkv.rows(), 4);
  ASSERT_EQ(a.qkv.cols(), 24);
  EXPECT_EQ(host(*be, a.x), x);
  EXPECT_EQ(host(*be, a.qkv), qkv);
  EXPECT_EQ(host(*be, a.fc1), fc1);
}

}  // namespace
}  // namespace foresight::trainer
