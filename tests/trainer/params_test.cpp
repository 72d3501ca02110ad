// Layout-independent initialisation and the rank layout: every tensor-parallel slice holds exactly
// the single-rank values of its part of the full tensor (rows, columns, and the q/k/v head split),
// and ranks map to Megatron-LM's grid (tp innermost, then dp, then pp).
#include <gtest/gtest.h>

#include "tests/trainer/host_copy.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/layout.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {
namespace {

using test::host;

TEST(Params, TensorParallelSlicesEqualTheFullTensor) {
  auto be = make_cpu_backend();
  const ParamDecl decls[] = {
      {.name = "rows", .rows = 8, .cols = 3, .split = Split::rows, .init = Init::normal, .stddev = 1},
      {.name = "cols", .rows = 3, .cols = 8, .split = Split::columns, .init = Init::normal, .stddev = 1},
      {.name = "qkv", .rows = 2, .cols = 12, .split = Split::qkv_heads, .init = Init::normal, .stddev = 1},
  };
  ParamStore full(1, 0);
  for (const auto& d : decls) full.declare(d);
  full.allocate(*be, 42);
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
    ParamStore part(2, tp_rank);
    for (const auto& d : decls) part.declare(d);
    part.allocate(*be, 42);
    const auto f_rows = host(*be, full[0].value), p_rows = host(*be, part[0].value);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(p_rows[i * 3 + j], f_rows[(tp_rank * 4 + i) * 3 + j]);
    const auto f_cols = host(*be, full[1].value), p_cols = host(*be, part[1].value);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_EQ(p_cols[i * 4 + j], f_cols[i * 8 + tp_rank * 4 + j]);
    // qkv: full columns [q0 q1 | k0 k1 | v0 v1] (2 columns per head); rank r holds [qr | kr | vr].
    const auto f_qkv = host(*be, full[2].value), p_qkv = host(*be, part[2].value);
    for (int i = 0; i < 2; ++i)
      for (int which = 0; which < 3; ++which)
        for (int j = 0; j < 2; ++j)
          EXPECT_EQ(p_qkv[i * 6 + which * 2 + j], f_qkv[i * 12 + which * 4 + tp_rank * 2 + j]);
  }
}

TEST(Params, InitialValuesAreNormalWithTheDeclaredSpread) {
  const ParamDecl d{.name = "w", .rows = 200, .cols = 100, .init = Init::normal, .stddev = 0.02f};
  double sum = 0, sq = 0;
  for (int i = 0; i < 200; ++i)
    for (int j = 0; j < 100; ++j) {
      const double v = ParamStore::initial_value(3, d, i, j);
      sum += v;
      sq += v * v;
    }
  const double n = 20000, mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.03);
  EXPECT_NE(ParamStore::initial_value(3, d, 0, 0), ParamStore::initial_value(4, d, 0, 0));  // seed matters
}

TEST(Layout, MegatronOrderAndTheAlternative) {
  PlanSpec p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  // tp-dp-pp: rank = tp + 2*(dp + 2*pp). Rank 5 = 1 + 2*(0 + 2*1): tp 1, dp 0, pp 1.
  RankLayout l = make_layout(p, 5);
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.dp_rank, 0);
  EXPECT_EQ(l.pp_rank, 1);
  EXPECT_EQ(l.prev_stage_rank(), 1);
  p.placement = Placement::tp_pp_dp;  // rank = tp + 2*(pp + 2*dp): rank 5 is tp 1, pp 0, dp 1
  l = make_layout(p, 5);
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.pp_rank, 0);
  EXPECT_EQ(l.dp_rank, 1);
  EXPECT_EQ(l.next_stage_rank(), 7);
  for (int r = 0; r < 8; ++r) {
    const RankLayout x = make_layout(p, r);
    EXPECT_EQ(x.world_rank(x.tp_rank, x.pp_rank, x.dp_rank), r);
  }
}

}  // namespace
}  // namespace foresight::trainer
