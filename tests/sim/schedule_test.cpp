// Pipeline schedules against the closed forms of Narayanan et al. 2021 sec. 2.2: with equal
// forward time tf and backward time tb per micro-batch and stage and free transfers, 1F1B and
// GPipe take (m + p - 1)(tf + tb); the bubble fraction (p-1)/m; interleaving with v chunks
// (each chunk tf/v, tb/v) divides the bubble by v.
#include <gtest/gtest.h>

#include <set>

#include "sim/analytic_engine.hpp"
#include "sim/fast_engine.hpp"
#include "sim/schedule.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {
WorkloadCosts uniform(Schedule sched, int p, int m, int v, double tf, double tb) {
  WorkloadCosts c;
  c.shape = ScheduleShape{sched, p, m, v, 1};
  ChunkCosts cc;
  cc.forward = Seconds(tf / v);
  cc.backward = Seconds(tb / v);
  c.chunk.assign(p, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(1, cc)));
  c.p2p_forward = {Seconds(0)};
  c.p2p_backward = {Seconds(0)};
  return c;
}
double iteration(const WorkloadCosts& c) { return run_analytic(build_workload(c)).iteration.value(); }
}  // namespace

TEST(Schedule, EveryOpExactlyOnce) {
  for (auto sched : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    const int p = 4, m = 8, v = sched == Schedule::interleaved ? 3 : 1;
    for (int s = 0; s < p; ++s) {
      auto ops = stage_schedule({sched, p, m, v, 1}, s);
      std::set<std::tuple<int, int, int>> seen;
      for (const auto& o : ops) seen.insert({int(o.pass), o.microbatch, o.chunk});
      EXPECT_EQ(ops.size(), std::size_t(2 * m * v));
      EXPECT_EQ(seen.size(), ops.size());
    }
  }
}

TEST(Schedule, OneFOneBWarmupIsPMinusStageMinusOne) {
  const auto ops = stage_schedule({Schedule::one_f_one_b, 4, 8, 1, 1}, 1);
  // Stage 1 of 4: 2 warm-up forwards, then F B alternating.
  EXPECT_EQ(ops[0].pass, Pass::forward);
  EXPECT_EQ(ops[1].pass, Pass::forward);
  EXPECT_EQ(ops[2].pass, Pass::forward);
  EXPECT_EQ(ops[3].pass, Pass::backward);
  EXPECT_EQ(ops[3].microbatch, 0);
}

TEST(Schedule, BubbleFractionIsPMinusOneOverM) {
  const double tf = 1.0, tb = 2.0;
  for (auto sched : {Schedule::one_f_one_b, Schedule::gpipe}) {
    for (auto [p, m] : {std::pair{4, 8}, {8, 32}, {2, 3}, {6, 6}}) {
      const double t = iteration(uniform(sched, p, m, 1, tf, tb));
      const double ideal = m * (tf + tb);
      EXPECT_NEAR((t - ideal) / ideal, double(p - 1) / m, 1e-9) << "p=" << p << " m=" << m;
    }
  }
}

TEST(Schedule, InterleavingDividesTheBubbleByV) {
  const double tf = 1.0, tb = 2.0;
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 4}, {8, 16, 3}}) {
    const double t = iteration(uniform(Schedule::interleaved, p, m, v, tf, tb));
    const double ideal = m * (tf + tb);
    EXPECT_NEAR((t - ideal) / ideal, double(p - 1) / (double(m) * v), 1e-9) << "p=" << p << " m=" << m << " v=" << v;
  }
}

TEST(Schedule, SingleStageHasNoBubble) {
  EXPECT_NEAR(iteration(uniform(Schedule::one_f_one_b, 1, 5, 1, 1.0, 2.0)), 15.0, 1e-12);
}

TEST(Schedule, TransfersAddToTheCriticalPath) {
  // 2 stages, 1 micro-batch: F0, send, F1, B1, send, B0 = 1 + 0.5 + 1 + 2 + 0.5 + 2.
  auto c = uniform(Schedule::one_f_one_b, 2, 1, 1, 1.0, 2.0);
  c.p2p_forward = {Seconds(0.5)};
  c.p2p_backward = {Seconds(0.5)};
  EXPECT_NEAR(iteration(c), 7.0, 1e-12);
}

TEST(Schedule, OverlappedDataParallelSyncHidesBehindTheLastBackward) {
  // One stage, 2 micro-batches: F0 [0,1] B0 [1,3] F1 [3,4] B1 [4,6]. Overlapped, the sync's buckets
  // start with B1 at 4; only the last bucket (the tail) must follow B1's end at 6.
  for (const bool fast : {false, true}) {
    auto c = uniform(Schedule::one_f_one_b, 1, 2, 1, 1.0, 2.0);
    c.dp_overlap = true;
    c.optimizer = {Seconds(0.5)};
    auto run = [&] { return fast ? run_fast(c) : run_analytic(build_workload(c)); };
    // 1.5 s of buckets: 1.4 s from t = 4 ends at 5.4 < 6, then the 0.1 s tail: exposed 0.1.
    c.dp_grad_sync = {Seconds(1.5)};
    c.dp_sync_tail = {Seconds(0.1)};
    auto r = run();
    EXPECT_NEAR(r.iteration.value(), 6.0 + 0.1 + 0.5, 1e-12) << (fast ? "fast" : "graph");
    EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 0.1, 1e-12);
    // 3 s of buckets: 2.9 s from 4 end at 6.9, then the tail: 7.0, exposed 1.0 after B1.
    c.dp_grad_sync = {Seconds(3.0)};
    r = run();
    EXPECT_NEAR(r.iteration.value(), 7.0 + 0.5, 1e-12) << (fast ? "fast" : "graph");
    EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 1.0, 1e-12);
    EXPECT_NEAR(r.stages[0].total().value(), r.iteration.value(), 1e-12);
    // Without overlap the whole 3 s follows B1.
    c.dp_overlap = false;
    EXPECT_NEAR(run().iteration.value(), 6.0 + 3.0 + 0.5, 1e-12);
  }
}

TEST(Schedule, InterleavedChunksStartTheirOwnSyncWithTheirLastBackward) {
  // p 2, m 2, v 2, forward 0.5 and backward 1.0 per chunk, free transfers. Stage 0 runs
  // F0.c0 F1.c0 F0.c1 F1.c1 B0.c1 B1.c1 B0.c0 B1.c0; worked by hand (dependencies across the two
  // stages), its last backward of chunk 1 is [4.5, 5.5] and of chunk 0 [6.5, 7.5]; stage 1's are
  // [3.5, 4.5] and [5.5, 6.5]. Each chunk carries half the sync; the tail (last bucket) is 0.2 s,
  // the optimizer 0.5 s.
  for (const bool fast : {false, true}) {
    auto c = uniform(Schedule::interleaved, 2, 2, 2, 1.0, 2.0);
    c.dp_overlap = true;
    c.optimizer = {Seconds(0.5), Seconds(0.5)};
    c.dp_sync_tail = {Seconds(0.2), Seconds(0.2)};
    c.dp_sync_chunk_share = {{0.5, 0.5}, {0.5, 0.5}};
    auto run = [&] { return fast ? run_fast(c) : run_analytic(build_workload(c)); };
    // 2 s: chunk 1's 0.8 s from 4.5, tail after 5.5: 5.7; chunk 0's from 6.5 to 7.3, tail after
    // 7.5: 7.7, exposed 0.2; the step ends 8.2 (stage 1: 6.7 + 0.5).
    c.dp_grad_sync = {Seconds(2.0), Seconds(2.0)};
    auto r = run();
    EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 0.2, 1e-12) << (fast ? "fast" : "graph");
    EXPECT_NEAR(r.iteration.value(), 8.2, 1e-12) << (fast ? "fast" : "graph");
    // 6 s: chunk 1's 2.8 s run 4.5 -> 7.3, its tail to 7.5; chunk 0's wait for them on the DP
    // stream: 7.5 -> 10.3, tail 10.5; exposed 3.0, the step 11.0.
    c.dp_grad_sync = {Seconds(6.0), Seconds(6.0)};
    r = run();
    EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 3.0, 1e-12) << (fast ? "fast" : "graph");
    EXPECT_NEAR(r.iteration.value(), 11.0, 1e-12) << (fast ? "fast" : "graph");
    // Without per-chunk shares the whole 2 s waits for the stage's last backward (6.5): 8.3, then
    // the tail after 7.5: 8.5, exposed 1.0, the step 9.0.
    c.dp_grad_sync = {Seconds(2.0), Seconds(2.0)};
    c.dp_sync_chunk_share.clear();
    r = run();
    EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 1.0, 1e-12) << (fast ? "fast" : "graph");
    EXPECT_NEAR(r.iteration.value(), 9.0, 1e-12) << (fast ? "fast" : "graph");
  }
}

TEST(Schedule, DataParallelSyncAndOptimizerFollowTheLastBackward) {
  auto c = uniform(Schedule::one_f_one_b, 1, 2, 1, 1.0, 2.0);
  c.dp_grad_sync = {Seconds(0.25)};
  c.optimizer = {Seconds(0.5)};
  const auto r = run_analytic(build_workload(c));
  EXPECT_NEAR(r.iteration.value(), 6.0 + 0.25 + 0.5, 1e-12);
  EXPECT_NEAR(r.stages[0].busy[int(Category::dp_comm)].value(), 0.25, 1e-12);
  EXPECT_NEAR(r.stages[0].total().value(), r.iteration.value(), 1e-12);
}

// ---- Zero bubble (ZB-H1) and DualPipe ------------------------------------------------------------
// References: the bubble columns of deepseek-ai/DualPipe's README (after Qi et al. 2023 and the
// DeepSeek-V3 report, Table 2): 1F1B (p-1)(F+B), ZB1P (p-1)(F+B-2W), DualPipe (p/2-1)(F&B+B-3W),
// F a forward chunk, B a full backward chunk, W its weight-gradient part, F&B an overlapped pair.

namespace {
WorkloadCosts split_uniform(Schedule sched, int p, int m, double tf, double tb, double tw) {
  const int v = sched == Schedule::dualpipe ? 2 : 1;
  WorkloadCosts c = uniform(sched, p, m, 1, tf, tb);
  c.shape.virtual_stages = v;
  ChunkCosts cc = c.chunk[0][0][0];
  cc.weight_grad = Seconds(tw);
  c.chunk.assign(p, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(1, cc)));
  return c;
}
}  // namespace

TEST(Schedule, ZeroBubbleAndDualPipeRunEveryPassOnce) {
  for (auto [sched, p, m] : {std::tuple{Schedule::zb_h1, 4, 8}, {Schedule::zb_h1, 5, 3}, {Schedule::dualpipe, 4, 8},
                             {Schedule::dualpipe, 8, 20}}) {
    const ScheduleShape shape{sched, p, m, sched == Schedule::dualpipe ? 2 : 1, 1};
    for (int s = 0; s < p; ++s) {
      std::set<std::tuple<int, int, int>> seen;
      int splits = 0, weights = 0;
      for (const auto& o : stage_schedule(shape, s)) {
        EXPECT_TRUE(seen.insert({int(o.pass), o.microbatch, o.chunk}).second)
            << to_string(sched) << " stage " << s << " repeats pass " << int(o.pass) << " mb " << o.microbatch;
        if (sched == Schedule::dualpipe) {  // a direction's micro-batches on its own chunk
          EXPECT_EQ(o.chunk, 2 * o.microbatch < m ? 0 : 1);
        }
        splits += o.split;
        weights += o.pass == Pass::weight;
        if (o.pass == Pass::weight) {  // after its split backward
          EXPECT_TRUE(seen.count({int(Pass::backward), o.microbatch, o.chunk}));
        }
      }
      EXPECT_EQ(splits, weights);
      EXPECT_EQ(int(seen.size()) - weights, 2 * m) << to_string(sched) << " stage " << s;
      // ZB-H1 leaves stage 0 as 1F1B; the others split at least their first backward.
      if (sched == Schedule::zb_h1) {
        EXPECT_EQ(splits > 0, s > 0) << "stage " << s;
      }
    }
  }
}

TEST(Schedule, ZeroBubbleH1BubbleIsPMinusOneTimesFPlusBMinusTwoW) {
  // F = 1, B = 2 (input gradients 1, weights W = 1): ZB-H1's bubble (p-1)(F+B-2W) = p - 1,
  // a third of 1F1B's (p-1)(F+B).
  const double tf = 1.0, tb = 2.0, tw = 1.0;
  for (auto [p, m] : {std::pair{4, 8}, {8, 32}, {4, 4}}) {
    const double t = iteration(split_uniform(Schedule::zb_h1, p, m, tf, tb, tw));
    EXPECT_NEAR(t - m * (tf + tb), (p - 1) * (tf + tb - 2 * tw), 1e-9) << "p=" << p << " m=" << m;
    EXPECT_NEAR(iteration(uniform(Schedule::one_f_one_b, p, m, 1, tf, tb)) - m * (tf + tb), (p - 1) * (tf + tb), 1e-9);
  }
}

TEST(Schedule, DualPipeBubbleIsHalfThePipelineTimesFAndBPlusBMinusThreeW) {
  // Without communication an overlapped pair takes F + B: bubble (p/2 - 1)(F + 2B - 3W).
  const double tf = 1.0, tb = 2.0, tw = 1.0;
  for (auto [p, m] : {std::pair{4, 8}, {8, 20}, {8, 16}, {16, 64}}) {
    const double t = iteration(split_uniform(Schedule::dualpipe, p, m, tf, tb, tw));
    EXPECT_NEAR(t - m * (tf + tb), (p / 2 - 1) * (tf + tb + tb - 3 * tw), 1e-9) << "p=" << p << " m=" << m;
  }
}
