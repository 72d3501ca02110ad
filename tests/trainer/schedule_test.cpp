// Pipeline schedules: the 1F1B order against the hand-written PipeDream-Flush order (Narayanan et
// al. 2021 fig. 4), its in-flight bound, and a simulation of every stage's op list with
// non-blocking sends and blocking receives showing that the stages together complete.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>

#include "trainer/schedule.hpp"

namespace foresight::trainer {
namespace {

TEST(Schedule, OneFOneBOrderByHand) {
  // 4 stages, 8 micro-batches: stage 0 warms up with 3 forwards, stage 3 alternates at once.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::one_f_one_b, 4, 0, 8)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::one_f_one_b, 4, 2, 8)),
            "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::one_f_one_b, 4, 3, 8)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: all forwards, then all backwards.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::one_f_one_b, 4, 0, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::gpipe, 2, 1, 3)), "F0 F1 F2 B0 B1 B2");
}

TEST(Schedule, OneFOneBKeepsAtMostStagesMinusStageInFlight) {
  for (int stages : {1, 2, 3, 4})
    for (int stage = 0; stage < stages; ++stage)
      for (int m : {1, 3, 8}) {
        int in_flight = 0, peak = 0;
        for (const PipelineOp& op : pipeline_ops(Schedule::one_f_one_b, stages, stage, m)) {
          if (op.kind == PipelineOpKind::forward) peak = std::max(peak, ++in_flight);
          if (op.kind == PipelineOpKind::backward) --in_flight;
        }
        EXPECT_EQ(in_flight, 0);
        EXPECT_LE(peak, std::min(m, stages - stage)) << stages << " " << stage << " " << m;
      }
}

/// Runs every stage's list: a send completes at once (buffered), a receive blocks until the
/// matching message exists. Returns false on deadlock.
bool completes(Schedule s, int stages, int m) {
  std::vector<std::vector<PipelineOp>> lists;
  for (int st = 0; st < stages; ++st) lists.push_back(pipeline_ops(s, stages, st, m));
  std::vector<std::size_t> pc(std::size_t(stages), 0);
  std::set<std::tuple<int, int, int>> mailbox;  // (to stage, micro-batch, is gradient)
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < stages; ++st) {
      while (pc[st] < lists[st].size()) {
        const PipelineOp& op = lists[st][pc[st]];
        if (op.kind == PipelineOpKind::recv_activation || op.kind == PipelineOpKind::recv_gradient) {
          const auto key = std::make_tuple(st, op.micro_batch, op.kind == PipelineOpKind::recv_gradient ? 1 : 0);
          if (!mailbox.erase(key)) break;
        }
        if (op.kind == PipelineOpKind::send_activation) mailbox.insert({st + 1, op.micro_batch, 0});
        if (op.kind == PipelineOpKind::send_gradient) mailbox.insert({st - 1, op.micro_batch, 1});
        ++pc[st];
        progress = true;
      }
    }
  }
  for (int st = 0; st < stages; ++st)
    if (pc[st] != lists[st].size()) return false;
  return mailbox.empty();
}

TEST(Schedule, EveryStageCompletesWithNonBlockingSends) {
  for (Schedule s : {Schedule::one_f_one_b, Schedule::gpipe})
    for (int stages : {1, 2, 4, 8})
      for (int m : {1, 2, 5, 16}) EXPECT_TRUE(completes(s, stages, m)) << to_string(s) << " " << stages << " " << m;
}

}  // namespace
}  // namespace foresight::trainer
