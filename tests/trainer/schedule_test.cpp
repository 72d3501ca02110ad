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
/// message from the peer and tag pipeline_message() names exists. Returns false on deadlock.
bool completes(Schedule s, int stages, int m, int chunks = 1, int slices = 1) {
  std::vector<std::vector<PipelineOp>> lists;
  for (int st = 0; st < stages; ++st) lists.push_back(pipeline_ops(s, stages, st, m, chunks, slices));
  std::vector<std::size_t> pc(std::size_t(stages), 0);
  std::multiset<std::tuple<int, int, int>> mailbox;  // (from stage, to stage, tag)
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < stages; ++st) {
      while (pc[st] < lists[st].size()) {
        const PipelineOp& op = lists[st][pc[st]];
        if (op.kind == PipelineOpKind::recv_activation || op.kind == PipelineOpKind::recv_gradient) {
          const PipelineMessage msg = pipeline_message(op, stages, st, chunks);
          auto it = mailbox.find({msg.peer_stage, st, msg.tag});
          if (it == mailbox.end()) break;
          mailbox.erase(it);
        }
        if (op.kind == PipelineOpKind::send_activation || op.kind == PipelineOpKind::send_gradient) {
          const PipelineMessage msg = pipeline_message(op, stages, st, chunks);
          if (mailbox.count({st, msg.peer_stage, msg.tag})) return false;  // tags must be unique in flight
          mailbox.insert({st, msg.peer_stage, msg.tag});
        }
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

TEST(Schedule, InterleavedOrderByHand) {
  // Megatron-LM's interleaved schedule, 2 stages x 2 chunks, 4 micro-batches. Stage 0: warm-up
  // 2*(2-0-1) + (2-1)*2 = 4 forwards (micro-batches 0,1 on chunk 0, then on chunk 1), then 1F1B
  // whose backwards start on the last chunk.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::interleaved, 2, 0, 4, 2)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  // Stage 1 warms up with (2-1)*2 = 2 forwards.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::interleaved, 2, 1, 4, 2)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
}

TEST(Schedule, InterleavedRunsEveryChunkOfEveryMicroBatchOnce) {
  for (int stages : {2, 4})
    for (int chunks : {2, 3})
      for (int m : {stages, 2 * stages, 4 * stages})
        for (int st = 0; st < stages; ++st) {
          std::multiset<std::tuple<int, int, int>> seen;  // (kind, micro-batch, chunk)
          std::map<std::pair<int, int>, int> forwarded;   // forward before backward
          for (const PipelineOp& op : pipeline_ops(Schedule::interleaved, stages, st, m, chunks)) {
            if (op.kind == PipelineOpKind::forward) forwarded[{op.micro_batch, op.chunk}] = 1;
            if (op.kind == PipelineOpKind::backward) {
              EXPECT_TRUE(forwarded.count({op.micro_batch, op.chunk}));
            }
            if (op.kind == PipelineOpKind::forward || op.kind == PipelineOpKind::backward)
              seen.insert({int(op.kind), op.micro_batch, op.chunk});
          }
          EXPECT_EQ(seen.size(), std::size_t(2 * m * chunks));
          for (const auto& t : seen) EXPECT_EQ(seen.count(t), 1u);
        }
}

TEST(Schedule, InterleavedAndTeraPipeComplete) {
  for (int stages : {2, 3, 4})
    for (int chunks : {2, 3})
      for (int m : {stages, 2 * stages, 3 * stages})
        EXPECT_TRUE(completes(Schedule::interleaved, stages, m, chunks)) << stages << " " << chunks << " " << m;
  for (int stages : {1, 2, 4})
    for (int slices : {1, 2, 3})
      for (int m : {1, 4}) EXPECT_TRUE(completes(Schedule::terapipe, stages, m * slices, 1, slices));
}

TEST(Schedule, TeraPipeRunsSlicesForwardThenBackwardInReverse) {
  // 2 micro-batches of 3 slices: units 0-2 and 3-5.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::terapipe, 2, 1, 6, 1, 3)), "F0 F1 F2 F3 F4 F5 B2 B1 B0 B5 B4 B3");
}

}  // namespace
}  // namespace foresight::trainer
