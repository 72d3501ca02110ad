// The MPI communicator and the NCCL communicator over its MPI stand-in, under mpirun (launched with
// 3 ranks by CTest): every collective and the point-to-point messages against values each rank can
// compute by hand; for the stand-in also NCCL's point-to-point rules (a send waits for its receive,
// a pair's messages meet in issue order whatever their tags).
#include <gtest/gtest.h>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "trainer/bootstrap.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/mpi_communicator.hpp"

namespace foresight::trainer {
namespace {

/// Parameter: the library under test, "mpi" or "nccl" (the NCCL communicator on the stand-in).
struct Fixture : ::testing::TestWithParam<std::string> {
  std::unique_ptr<Communicator> mpi_world = make_mpi_communicator(MPI_COMM_WORLD, false);
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Communicator> world = GetParam() == "nccl" ? make_nccl_world(*mpi_world, *be) : nullptr;
  Communicator* c = world ? world.get() : mpi_world.get();
  int r = c->rank(), n = c->size();
  Tensor filled(std::int64_t count, const std::function<float(int)>& f) {
    Tensor t = be->zeros(count, 1);
    for (int i = 0; i < count; ++i) t.data()[i] = f(i);
    return t;
  }
};

TEST_P(Fixture, AllReduceSumMaxAndAsync) {
  Tensor t = filled(4, [&](int i) { return float(r + i); });
  c->all_reduce(t, ReduceOp::sum);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data()[i], float(n * (n - 1) / 2 + n * i));
  Tensor m = filled(2, [&](int i) { return float(r * (i ? -1 : 1)); });
  c->all_reduce(m, ReduceOp::max);
  EXPECT_EQ(m.data()[0], float(n - 1));
  EXPECT_EQ(m.data()[1], 0.0f);
  Tensor a = filled(3, [&](int) { return 1.0f; });
  auto req = c->all_reduce_async(a, ReduceOp::sum);
  req->wait();
  EXPECT_EQ(a.data()[2], float(n));
  double d[2] = {double(r), 0.5};
  c->all_reduce(d, ReduceOp::sum);
  EXPECT_EQ(d[0], n * (n - 1) / 2.0);
  EXPECT_EQ(d[1], 0.5 * n);
}

TEST_P(Fixture, GatherScatterAndAllToAll) {
  Tensor in = filled(2, [&](int i) { return float(10 * r + i); });
  Tensor out = be->zeros(2 * n, 1);
  c->all_gather(out, in);
  for (int k = 0; k < n; ++k) EXPECT_EQ(out.data()[2 * k + 1], float(10 * k + 1));
  // reduce_scatter: element j of the sum is sum_r (r + j) = n(n-1)/2 + n*j; rank r keeps [2r, 2r+2).
  Tensor full = filled(2 * n, [&](int j) { return float(r + j); });
  Tensor mine = be->zeros(2, 1);
  c->reduce_scatter(mine, full, ReduceOp::sum);
  EXPECT_EQ(mine.data()[0], float(n * (n - 1) / 2 + n * 2 * r));
  // all_to_all: chunk k of rank r holds 100*r + k; afterwards chunk k holds 100*k + r.
  Tensor send = filled(n, [&](int k) { return float(100 * r + k); });
  Tensor recv = be->zeros(n, 1);
  c->all_to_all(recv, send);
  for (int k = 0; k < n; ++k) EXPECT_EQ(recv.data()[k], float(100 * k + r));
}

// A reduction into a bf16 tensor sums in fp32 and rounds the result once: every rank adds
// 1 + 2^-7 (a bf16, 0x3F81); over 3 ranks 3 + 3 * 2^-7 = 3.0234375 (exact in fp32) lies half-way
// between the bf16s 3 + 2^-6 (0x4041, odd) and 3 + 2^-5 (0x4042, even): 3.03125. An fp32 tensor
// keeps the sum as is.
TEST_P(Fixture, Bf16ReductionsRoundTheirResultOnce) {
  ASSERT_EQ(n, 3) << "the hand-computed sums assume 3 ranks";
  auto bf16 = make_cpu_backend(Precision::bf16);
  const float v = 1.0f + std::ldexp(1.0f, -7);
  Tensor b = bf16->zeros(2, 1), f = bf16->zeros_fp32(2, 1), a = bf16->zeros(2, 1);
  for (Tensor* t : {&b, &f, &a}) bf16->fill(*t, v);
  c->all_reduce(b, ReduceOp::sum);
  c->all_reduce(f, ReduceOp::sum);
  c->all_reduce_async(a, ReduceOp::sum)->wait();
  EXPECT_EQ(b.data()[1], 3.03125f);
  EXPECT_EQ(a.data()[1], 3.03125f);
  EXPECT_EQ(f.data()[1], 3.0234375f);
  Tensor full = bf16->zeros(3, 1), mine = bf16->zeros(1, 1);
  bf16->fill(full, v);
  c->reduce_scatter(mine, full, ReduceOp::sum);
  EXPECT_EQ(mine.data()[0], 3.03125f);
}

TEST_P(Fixture, LoneSendThenRecvRingOverMpi) {
  // Every rank sends before it receives: MPI buffers the small sends. Under NCCL's rules this ring
  // deadlocks (each send waits for a receive posted after it), hence exchange() below.
  if (GetParam() != "mpi") GTEST_SKIP() << "a lone-send ring deadlocks under NCCL's rules";
  Tensor out = filled(5, [&](int i) { return float(r * 7 + i); });
  auto req = c->send(out, (r + 1) % n, 3);
  Tensor in = be->zeros(5, 1);
  c->recv(in, (r + n - 1) % n, 3);
  req->wait();
  EXPECT_EQ(in.data()[4], float(((r + n - 1) % n) * 7 + 4));
}

TEST_P(Fixture, RingExchangeAndSplit) {
  Tensor out = filled(5, [&](int i) { return float(r * 7 + i); });
  Tensor in = be->zeros(5, 1);
  const Transfer ring[] = {{.kind = Transfer::Kind::send, .tensor = out, .peer = (r + 1) % n, .tag = 3},
                           {.kind = Transfer::Kind::recv, .tensor = in, .peer = (r + n - 1) % n, .tag = 3}};
  c->exchange(ring);
  EXPECT_EQ(in.data()[4], float(((r + n - 1) % n) * 7 + 4));
  c->barrier();
  // Even and odd ranks form two groups, ordered by descending world rank.
  auto group = c->split(r % 2, -r);
  EXPECT_EQ(group->size(), (n + 1 - r % 2) / 2);
  double v[1] = {double(r)};
  group->all_reduce(v, ReduceOp::max);
  const int top = (n - 1) % 2 == r % 2 ? n - 1 : n - 2;
  EXPECT_EQ(v[0], double(top));
  EXPECT_EQ(group->rank(), (top - r) / 2);
}

TEST_P(Fixture, NcclSendWaitsForItsReceive) {
  if (GetParam() != "nccl") GTEST_SKIP() << "MPI may buffer a small send";
  // Rank 1 posts its receive 0.3 s late; rank 0's send (a 16-byte message MPI would buffer) must
  // not complete before then, as NCCL's may not.
  using Clock = std::chrono::steady_clock;
  Tensor t = filled(4, [&](int i) { return float(i + 1); });
  c->barrier();
  if (r == 0) {
    const auto t0 = Clock::now();
    c->send(t, 1, 0)->wait();
    EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.25);
  } else if (r == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Tensor in = be->zeros(4, 1);
    c->recv(in, 0, 0);
    EXPECT_EQ(in.data()[3], 4.0f);
  }
  c->barrier();
}

TEST_P(Fixture, NcclMatchesAPairsMessagesInIssueOrderIgnoringTags) {
  if (GetParam() != "nccl") GTEST_SKIP() << "MPI matches on tags";
  // Rank 0 sends A (tag 5) then B (tag 6); rank 1 receives "tag 6" then "tag 5". NCCL has no tags:
  // the first receive gets A. (MPI would hand it B.)
  if (r == 0) {
    Tensor a = filled(2, [&](int) { return 1.0f; }), b = filled(2, [&](int) { return 2.0f; });
    const Transfer sends[] = {{.kind = Transfer::Kind::send, .tensor = a, .peer = 1, .tag = 5},
                              {.kind = Transfer::Kind::send, .tensor = b, .peer = 1, .tag = 6}};
    c->exchange(sends);
  } else if (r == 1) {
    Tensor first = be->zeros(2, 1), second = be->zeros(2, 1);
    const Transfer recvs[] = {{.kind = Transfer::Kind::recv, .tensor = first, .peer = 0, .tag = 6},
                              {.kind = Transfer::Kind::recv, .tensor = second, .peer = 0, .tag = 5}};
    c->exchange(recvs);
    EXPECT_EQ(first.data()[0], 1.0f);
    EXPECT_EQ(second.data()[0], 2.0f);
  }
  EXPECT_STREQ(c->library(), "nccl-standin");
}

INSTANTIATE_TEST_SUITE_P(Libraries, Fixture, ::testing::Values("mpi", "nccl"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

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
