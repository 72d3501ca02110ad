// The MPI communicator under mpirun (launched with 3 ranks by CTest): every collective and the
// point-to-point messages against values each rank can compute by hand.
#include <gtest/gtest.h>

#include <mpi.h>

#include <cmath>

#include "trainer/cpu_backend.hpp"
#include "trainer/mpi_communicator.hpp"

namespace foresight::trainer {
namespace {

struct Fixture : ::testing::Test {
  std::unique_ptr<Communicator> world = make_mpi_communicator(MPI_COMM_WORLD, false);
  std::unique_ptr<Backend> be = make_cpu_backend();
  int r = world->rank(), n = world->size();
  Tensor filled(std::int64_t count, const std::function<float(int)>& f) {
    Tensor t = be->zeros(count, 1);
    for (int i = 0; i < count; ++i) t.data()[i] = f(i);
    return t;
  }
};

TEST_F(Fixture, AllReduceSumMaxAndAsync) {
  Tensor t = filled(4, [&](int i) { return float(r + i); });
  world->all_reduce(t, ReduceOp::sum);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data()[i], float(n * (n - 1) / 2 + n * i));
  Tensor m = filled(2, [&](int i) { return float(r * (i ? -1 : 1)); });
  world->all_reduce(m, ReduceOp::max);
  EXPECT_EQ(m.data()[0], float(n - 1));
  EXPECT_EQ(m.data()[1], 0.0f);
  Tensor a = filled(3, [&](int) { return 1.0f; });
  auto req = world->all_reduce_async(a, ReduceOp::sum);
  req->wait();
  EXPECT_EQ(a.data()[2], float(n));
  double d[2] = {double(r), 0.5};
  world->all_reduce(d, ReduceOp::sum);
  EXPECT_EQ(d[0], n * (n - 1) / 2.0);
  EXPECT_EQ(d[1], 0.5 * n);
}

TEST_F(Fixture, GatherScatterAndAllToAll) {
  Tensor in = filled(2, [&](int i) { return float(10 * r + i); });
  Tensor out = be->zeros(2 * n, 1);
  world->all_gather(out, in);
  for (int k = 0; k < n; ++k) EXPECT_EQ(out.data()[2 * k + 1], float(10 * k + 1));
  // reduce_scatter: element j of the sum is sum_r (r + j) = n(n-1)/2 + n*j; rank r keeps [2r, 2r+2).
  Tensor full = filled(2 * n, [&](int j) { return float(r + j); });
  Tensor mine = be->zeros(2, 1);
  world->reduce_scatter(mine, full, ReduceOp::sum);
  EXPECT_EQ(mine.data()[0], float(n * (n - 1) / 2 + n * 2 * r));
  // all_to_all: chunk k of rank r holds 100*r + k; afterwards chunk k holds 100*k + r.
  Tensor send = filled(n, [&](int k) { return float(100 * r + k); });
  Tensor recv = be->zeros(n, 1);
  world->all_to_all(recv, send);
  for (int k = 0; k < n; ++k) EXPECT_EQ(recv.data()[k], float(100 * k + r));
}

// A reduction into a bf16 tensor sums in fp32 and rounds the result once: every rank adds
// 1 + 2^-7 (a bf16, 0x3F81); over 3 ranks 3 + 3 * 2^-7 = 3.0234375 (exact in fp32) lies half-way
// between the bf16s 3 + 2^-6 (0x4041, odd) and 3 + 2^-5 (0x4042, even): 3.03125. An fp32 tensor
// keeps the sum as is.
TEST_F(Fixture, Bf16ReductionsRoundTheirResultOnce) {
  ASSERT_EQ(n, 3) << "the hand-computed sums assume 3 ranks";
  auto bf16 = make_cpu_backend(Precision::bf16);
  const float v = 1.0f + std::ldexp(1.0f, -7);
  Tensor b = bf16->zeros(2, 1), f = bf16->zeros_fp32(2, 1), a = bf16->zeros(2, 1);
  for (Tensor* t : {&b, &f, &a}) bf16->fill(*t, v);
  world->all_reduce(b, ReduceOp::sum);
  world->all_reduce(f, ReduceOp::sum);
  world->all_reduce_async(a, ReduceOp::sum)->wait();
  EXPECT_EQ(b.data()[1], 3.03125f);
  EXPECT_EQ(a.data()[1], 3.03125f);
  EXPECT_EQ(f.data()[1], 3.0234375f);
  Tensor full = bf16->zeros(3, 1), mine = bf16->zeros(1, 1);
  bf16->fill(full, v);
  world->reduce_scatter(mine, full, ReduceOp::sum);
  EXPECT_EQ(mine.data()[0], 3.03125f);
}

TEST_F(Fixture, RingSendRecvAndSplit) {
  Tensor out = filled(5, [&](int i) { return float(r * 7 + i); });
  auto req = world->send(out, (r + 1) % n, 3);
  Tensor in = be->zeros(5, 1);
  world->recv(in, (r + n - 1) % n, 3);
  req->wait();
  EXPECT_EQ(in.data()[4], float(((r + n - 1) % n) * 7 + 4));
  // Even and odd ranks form two groups, ordered by descending world rank.
  auto group = world->split(r % 2, -r);
  EXPECT_EQ(group->size(), (n + 1 - r % 2) / 2);
  double v[1] = {double(r)};
  group->all_reduce(v, ReduceOp::max);
  const int top = (n - 1) % 2 == r % 2 ? n - 1 : n - 2;
  EXPECT_EQ(v[0], double(top));
  EXPECT_EQ(group->rank(), (top - r) / 2);
}

}  // namespace
}  // namespace foresight::trainer

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
