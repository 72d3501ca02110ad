// The fast path must reproduce the graph engine exactly (same list schedule): iteration time and
// every stage's breakdown, over schedules, shapes and random costs.
#include <gtest/gtest.h>

#include <random>

#include "sim/fast_engine.hpp"

using namespace foresight;
using namespace foresight::sim;

namespace {
WorkloadCosts random_costs(std::mt19937& rng, Schedule sched, int p, int m, int v, int slices) {
  std::uniform_real_distribution<double> u(0.5, 2.0);
  WorkloadCosts c;
  c.shape = ScheduleShape{sched, p, m, v, slices};
  c.chunk.assign(p, std::vector<std::vector<ChunkCosts>>(v, std::vector<ChunkCosts>(slices)));
  for (auto& st : c.chunk)
    for (auto& ch : st)
      for (auto& cc : ch) {
        cc.forward = Seconds(u(rng));
        cc.backward = Seconds(2 * u(rng));
        cc.weight_grad = cc.backward * (0.3 * u(rng));  // 15-60% of it (zero-bubble schedules split it)
        cc.forward_tp_comm = Seconds(0.1 * u(rng));
        cc.backward_tp_comm = Seconds(0.1 * u(rng));
        cc.recompute = Seconds(0.5 * u(rng));
        cc.recompute_tp_comm = Seconds(0.05 * u(rng));
      }
  for (int k = 0; k < slices; ++k) {
    c.p2p_forward.push_back(Seconds(0.2 * u(rng)));
    c.p2p_backward.push_back(Seconds(0.2 * u(rng)));
  }
  for (int s = 0; s < p; ++s) {
    c.dp_grad_sync.push_back(Seconds(u(rng)));
    c.optimizer.push_back(Seconds(0.3 * u(rng)));
    c.dp_param_gather.push_back(Seconds(0.2 * u(rng)));
  }
  return c;
}

// 1F1B on 2 stages, 2 micro-batches: forward 1, backward 2, every send `send` s, nothing else.
WorkloadCosts two_stage_1f1b(double send) {
  WorkloadCosts c;
  c.shape = ScheduleShape{Schedule::one_f_one_b, 2, 2, 1, 1};
  c.chunk.assign(2, std::vector<std::vector<ChunkCosts>>(1, std::vector<ChunkCosts>(1)));
  for (auto& st : c.chunk) {
    st[0][0].forward = Seconds(1);
    st[0][0].backward = Seconds(2);
  }
  c.p2p_forward = {Seconds(send)};
  c.p2p_backward = {Seconds(send)};
  return c;
}
}  // namespace

TEST(FastEngine, EqualsGraphEngineWithOverlappedDataParallelSync) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  struct Case { Schedule s; int p, m, v; };
  const Case cases[] = {{Schedule::one_f_one_b, 1, 4, 1}, {Schedule::one_f_one_b, 4, 8, 1},
                        {Schedule::gpipe, 3, 5, 1}, {Schedule::interleaved, 4, 8, 2},
                        {Schedule::interleaved, 3, 9, 3}, {Schedule::interleaved, 4, 8, 4},
                        {Schedule::interleaved, 2, 4, 4},
                        // The sync follows the last op that computes weight gradients: a deferred
                        // weight pass under zero bubble; DualPipe's two chunks each their own.
                        {Schedule::zb_h1, 4, 8, 1},       {Schedule::dualpipe, 4, 8, 2},
                        {Schedule::dualpipe, 6, 12, 2}};
  for (const auto& k : cases)
    for (int trial = 0; trial < 5; ++trial) {
      WorkloadCosts c = random_costs(rng, k.s, k.p, k.m, k.v, 1);
      c.dp_overlap = true;
      for (int s = 0; s < k.p; ++s) {
        c.dp_sync_tail.push_back(c.dp_grad_sync[s] * u(rng));
        c.dp_overlap_slowdown.push_back(c.dp_grad_sync[s] * (0.5 * u(rng)));
        // Deferred weight-gradient GEMMs (the last stage's LM head) before the last bucket.
        c.deferred_wgrad.push_back(s + 1 == k.p ? Seconds(u(rng)) : Seconds(0));
      }
      for (const bool per_chunk : {false, true}) {
        // With model chunks, each chunk's share of the sync may start with its own last backward.
        c.dp_sync_chunk_share.clear();
        if (per_chunk && k.v > 1)
          for (int s = 0; s < k.p; ++s) {
            std::vector<double> w(k.v);
            double sum = 0;
            for (double& x : w) sum += (x = 0.2 + u(rng));
            for (double& x : w) x /= sum;
            c.dp_sync_chunk_share.push_back(w);
          }
        const SimResult g = run_analytic(build_workload(c));
        const SimResult f = run_fast(c);
        EXPECT_NEAR(f.iteration.value(), g.iteration.value(), 1e-9 * g.iteration.value())
            << to_string(k.s) << " p" << k.p << " m" << k.m << " v" << k.v << (per_chunk ? " per chunk" : "");
        for (int s = 0; s < k.p; ++s)
          EXPECT_NEAR(f.stages[s].busy[int(Category::dp_comm)].value(), g.stages[s].busy[int(Category::dp_comm)].value(),
                      1e-9)
              << "stage " << s << (per_chunk ? " per chunk" : "");
      }
    }
}

TEST(FastEngine, EqualsGraphEngine) {
  std::mt19937 rng(7);
  struct Case { Schedule s; int p, m, v, slices; };
  const Case cases[] = {{Schedule::one_f_one_b, 1, 4, 1, 1},  {Schedule::one_f_one_b, 4, 8, 1, 1},
                        {Schedule::one_f_one_b, 8, 3, 1, 1},  {Schedule::gpipe, 4, 6, 1, 1},
                        {Schedule::interleaved, 4, 8, 2, 1},  {Schedule::interleaved, 3, 9, 3, 1},
                        // More chunks than stages at p = 2: the forward wrap 1 -> 0 shares the
                        // 1 -> 0 link direction with the backward sends (the graph engine once
                        // queued it behind the 0 -> 1 forward sends).
                        {Schedule::interleaved, 2, 4, 4, 1},  {Schedule::interleaved, 2, 6, 3, 1},
                        {Schedule::terapipe, 4, 2, 1, 5},     {Schedule::terapipe, 6, 1, 1, 8},
                        // Zero bubble: split backwards and deferred weight passes; DualPipe: two
                        // directions, chunk 1 of stage s holding segment p - 1 - s.
                        {Schedule::zb_h1, 4, 8, 1, 1},        {Schedule::zb_h1, 6, 3, 1, 1},
                        {Schedule::dualpipe, 4, 8, 2, 1},     {Schedule::dualpipe, 8, 20, 2, 1},
                        {Schedule::dualpipe, 2, 6, 2, 1}};
  // Blocking sends (on the sender's stream) and non-blocking ones (Megatron-Core's overlapped
  // interleaved sends: queued on the link, the sender's stream going on).
  for (const bool blocking : {true, false})
  for (const auto& k : cases) {
    for (int trial = 0; trial < 5; ++trial) {
      WorkloadCosts c = random_costs(rng, k.s, k.p, k.m, k.v, k.slices);
      c.p2p_blocks_sender = blocking;
      ASSERT_TRUE(fast_engine_applies(c));
      const SimResult g = run_analytic(build_workload(c));
      const SimResult f = run_fast(c);
      EXPECT_NEAR(f.iteration.value(), g.iteration.value(), 1e-9 * g.iteration.value())
          << to_string(k.s) << " p" << k.p << " m" << k.m << " v" << k.v << " slices " << k.slices
          << (blocking ? " blocking" : " non-blocking");
      for (int s = 0; s < k.p; ++s) {
        for (int cat = 0; cat < kCategories; ++cat)
          EXPECT_NEAR(f.stages[s].busy[cat].value(), g.stages[s].busy[cat].value(), 1e-9)
              << "stage " << s << " " << to_string(Category(cat));
        EXPECT_NEAR(f.stages[s].pp_wait.value(), g.stages[s].pp_wait.value(), 1e-9) << "stage " << s;
      }
      EXPECT_EQ(f.critical_stage, g.critical_stage);
    }
  }
}

TEST(FastEngine, NonBlockingSendsLetTheSenderGoOnByHand) {
  // 1F1B on 2 stages, 2 micro-batches; forward 1, backward 2, every send 0.5 (no other costs).
  // Blocking (the send on the sender's stream): stage 0 runs F0 [0, 1] and its send [1, 1.5], F1
  // [1.5, 2.5] and its send [2.5, 3]; stage 1 F0 [1.5, 2.5], B0 [2.5, 4.5] and its send [4.5, 5],
  // F1 [5, 6], B1 [6, 8] and its send [8, 8.5]; stage 0 B0 [5, 7], B1 [8.5, 10.5]: 10.5.
  // Non-blocking (Megatron-Core's overlapped sends): stage 0's F1 starts at 1 and its send waits
  // for the link, [2, 2.5]; stage 1's F1 runs [4.5, 5.5] right after B0, B1 [5.5, 7.5] and its send
  // [7.5, 8]; stage 0 B0 [5, 7], B1 [8, 10]: 10.
  WorkloadCosts c = two_stage_1f1b(0.5);
  for (const bool blocking : {true, false}) {
    c.p2p_blocks_sender = blocking;
    const double expected = blocking ? 10.5 : 10.0;
    EXPECT_NEAR(run_fast(c).iteration.value(), expected, 1e-12) << blocking;
    EXPECT_NEAR(run_analytic(build_workload(c)).iteration.value(), expected, 1e-12) << blocking;
  }
}

TEST(FastEngine, DeferredWeightGradientsFillTheLastStagesFlushByHand) {
  // 1F1B on 2 stages, 2 micro-batches; forward 1, backward 2, nothing else. Stage 0: F0 [0, 1], F1
  // [1, 2], B0 [4, 6], B1 [7, 9]; stage 1: F0 [1, 2], B0 [2, 4], F1 [4, 5], B1 [5, 7]. The last
  // stage is idle from 7 while stage 0 runs its last backward: deferred GEMMs (Megatron-Core's
  // deferred head weight gradients) of 1.5 end at 8.5 and leave the step at 9; 3 end at 10.
  WorkloadCosts c = two_stage_1f1b(0.0);
  for (const double deferred : {0.0, 1.5, 3.0}) {
    c.deferred_wgrad = {Seconds(0), Seconds(deferred)};
    const double expected = deferred > 2.0 ? 7.0 + deferred : 9.0;
    const SimResult f = run_fast(c), g = run_analytic(build_workload(c));
    EXPECT_NEAR(f.iteration.value(), expected, 1e-12) << deferred;
    EXPECT_NEAR(g.iteration.value(), expected, 1e-12) << deferred;
    // The GEMMs are backward compute of the last stage in both engines.
    EXPECT_NEAR(f.stages[1].busy[int(Category::backward)].value(), 4.0 + deferred, 1e-12);
    EXPECT_NEAR(g.stages[1].busy[int(Category::backward)].value(), 4.0 + deferred, 1e-12);
  }
}
