// Pipeline schedules: the 1F1B order against the hand-written PipeDream-Flush order (Narayanan et
// al. 2021 fig. 4), its in-flight bound, and a deadlock checker: a simulation of every stage's op
// list as the trainer issues it, under NCCL's point-to-point semantics (a send completes only once
// its receive is posted, messages between a pair matched in issue order, no tags), which fails on
// a deadlock or on a message received as another; shown failing on the executor it replaced.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

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

/// How a send completes in the simulation.
enum class SendMode {
  buffered,    // at once, the message waiting for its receive (MPI_Isend of a small message)
  rendezvous,  // only once the peer has posted the matching receive (NCCL, MPI_Ssend, large MPI messages)
};
/// How a stage issues its messages: each alone, blocking until done (the executor before pipeline
/// batches), or as the trainer does now (pipeline_steps: each run of sends and receives posted as
/// one group that completes when all of its messages have).
enum class Issue { one_at_a_time, batched };

struct Outcome {
  bool completed = false;
  std::string problem;  // the stages left blocked and on what, or a message received as another
};

std::string describe(const PipelineOp& op) {
  static const char* const kNames[] = {"recv_activation", "forward", "send_activation",
                                       "recv_gradient",   "backward", "send_gradient"};
  std::ostringstream os;
  os << kNames[int(op.kind)] << " u" << op.micro_batch << ".c" << op.chunk;
  return os.str();
}

/// Runs every stage's op list (`lists[stage]`, `chunks` model chunks per stage) as the given
/// executor would, with NCCL's matching: no tags, so the n-th send from stage a to stage b meets
/// the n-th receive b posts from a (in issue order, within a group in the group's order). A matched
/// pair must be the same message (pipeline_message's tag), else a receive would silently read
/// another tensor. Computations never block, so only the messages are simulated; stages advance
/// until every list is done or none can move (a deadlock).
Outcome simulate(const std::vector<std::vector<PipelineOp>>& lists, int chunks, SendMode mode, Issue issue) {
  const int stages = int(lists.size());
  std::vector<std::vector<std::vector<PipelineOp>>> batches(std::size_t(stages), std::vector<std::vector<PipelineOp>>{});
  for (int st = 0; st < stages; ++st) {
    const auto& ops = lists[std::size_t(st)];
    if (issue == Issue::batched) {
      for (const PipelineStep& step : pipeline_steps(ops))
        if (step.communication)
          batches[std::size_t(st)].emplace_back(ops.begin() + std::ptrdiff_t(step.first),
                                                ops.begin() + std::ptrdiff_t(step.first + step.count));
    } else {
      for (const PipelineOp& op : ops)
        if (is_message(op.kind)) batches[std::size_t(st)].push_back({op});
    }
  }
  std::vector<std::size_t> pc(std::size_t(stages), 0);           // current batch of each stage
  auto done = std::vector<std::vector<bool>>(std::size_t(stages));  // per op of the current batch
  std::map<std::pair<int, int>, int> sends_posted, recvs_posted;  // per (from, to)
  struct Waiting {
    int stage;
    std::size_t op;  // in that stage's current batch
    PipelineOp what;
    int tag;
  };
  std::map<std::tuple<int, int, int>, Waiting> open_sends, open_recvs;  // (from, to, n-th), not yet met
  std::string problem;
  // Posts stage st's current batch, meeting what its peers have posted; false on a mismatch.
  auto post = [&](int st) {
    const auto& batch = batches[std::size_t(st)][pc[std::size_t(st)]];
    done[std::size_t(st)].assign(batch.size(), false);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const PipelineOp& op = batch[i];
      const PipelineMessage msg = pipeline_message(op, stages, st, chunks);
      const bool send = op.kind == PipelineOpKind::send_activation || op.kind == PipelineOpKind::send_gradient;
      const int from = send ? st : msg.peer_stage, to = send ? msg.peer_stage : st;
      const int n = send ? sends_posted[{from, to}]++ : recvs_posted[{from, to}]++;
      if (send && mode == SendMode::buffered) done[std::size_t(st)][i] = true;
      auto& others = send ? open_recvs : open_sends;
      const auto it = others.find({from, to, n});
      if (it == others.end()) {
        (send ? open_sends : open_recvs).emplace(std::tuple{from, to, n}, Waiting{st, i, op, msg.tag});
        continue;
      }
      if (it->second.tag != msg.tag) {
        std::ostringstream os;  // (g++ 12 warns falsely, -Wrestrict, on chains of std::string +)
        os << "stage " << from << " -> " << to << " message #" << n << ": " << describe(send ? op : it->second.what)
           << " matched with " << describe(send ? it->second.what : op);
        problem = os.str();
        return false;
      }
      done[std::size_t(st)][i] = true;
      // A buffered send was done when posted; its stage may have moved on since.
      if (send || mode == SendMode::rendezvous) done[std::size_t(it->second.stage)][it->second.op] = true;
      others.erase(it);
    }
    return true;
  };
  for (int st = 0; st < stages; ++st)
    if (!batches[std::size_t(st)].empty() && !post(st)) return {false, problem};
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < stages; ++st) {
      const auto s = std::size_t(st);
      while (pc[s] < batches[s].size() && std::all_of(done[s].begin(), done[s].end(), [](bool d) { return d; })) {
        progress = true;
        if (++pc[s] < batches[s].size() && !post(st)) return {false, problem};
      }
    }
  }
  std::ostringstream blocked;
  for (int st = 0; st < stages; ++st) {
    const auto s = std::size_t(st);
    if (pc[s] == batches[s].size()) continue;
    blocked << "stage " << st << " blocked in {";
    for (std::size_t i = 0; i < done[s].size(); ++i)
      if (!done[s][i]) blocked << " " << describe(batches[s][pc[s]][i]);
    blocked << " }; ";
  }
  if (!blocked.str().empty()) return {false, "deadlock: " + blocked.str()};
  if (!open_sends.empty()) return {false, std::to_string(open_sends.size()) + " messages never received"};
  return {true, ""};
}

Outcome simulate(Schedule s, int stages, int units, int chunks, int slices, SendMode mode, Issue issue) {
  std::vector<std::vector<PipelineOp>> lists;
  for (int st = 0; st < stages; ++st) lists.push_back(pipeline_ops(s, stages, st, units, chunks, slices));
  return simulate(lists, chunks, mode, issue);
}

/// Every (schedule, stages, units, chunks, slices) the checker runs: each schedule over several
/// stage counts and micro-batch counts below, at and above the stage count; interleaving with
/// 2-4 chunks; TeraPipe with 1-4 slices per micro-batch.
struct Case {
  Schedule schedule;
  int stages, units, chunks, slices;
};
std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int stages : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 5, 8, 16}) cases.push_back({s, stages, m, 1, 1});
  for (int stages : {2, 3, 4})
    for (int chunks : {2, 3, 4})
      for (int k : {1, 2, 3}) cases.push_back({Schedule::interleaved, stages, k * stages, chunks, 1});
  for (int stages : {1, 2, 3, 4})
    for (int slices : {1, 2, 3, 4})
      for (int m : {1, 2, 5}) cases.push_back({Schedule::terapipe, stages, m * slices, 1, slices});
  return cases;
}

std::string name(const Case& c) {
  std::ostringstream os;
  os << to_string(c.schedule) << " stages " << c.stages << " units " << c.units << " chunks " << c.chunks << " slices "
     << c.slices;
  return os.str();
}

TEST(ScheduleRendezvous, TheTrainersBatchesCompleteForEverySchedule) {
  // The trainer's executor under NCCL's semantics: sends wait for their receives, no tags.
  int cases = 0;
  for (const Case& c : every_case()) {
    const Outcome o = simulate(c.schedule, c.stages, c.units, c.chunks, c.slices, SendMode::rendezvous, Issue::batched);
    EXPECT_TRUE(o.completed) << name(c) << ": " << o.problem;
    ++cases;
  }
  EXPECT_EQ(cases, 60 + 27 + 48);
}

TEST(ScheduleRendezvous, OneMessageAtATimeDeadlocksOneFOneB) {
  // The executor before pipeline batches: each send alone, blocking until its receive. Stage s
  // sends a forward's output while stage s+1 sends a backward's gradient, each waiting for the
  // other's receive (Narayanan et al. 2021's 1F1B steady state; why Megatron-LM pairs them).
  for (int stages : {2, 3, 4, 8})
    for (int m : {2, 3, 5, 8, 16}) {
      const Outcome o = simulate(Schedule::one_f_one_b, stages, m, 1, 1, SendMode::rendezvous, Issue::one_at_a_time);
      EXPECT_FALSE(o.completed) << stages << " stages, " << m << " micro-batches";
      EXPECT_NE(o.problem.find("deadlock"), std::string::npos) << o.problem;
    }
  // 2 stages, 2 micro-batches by hand: stage 0 (one warm-up forward) sends F1's output while
  // stage 1 sends B0's gradient.
  EXPECT_EQ(simulate(Schedule::one_f_one_b, 2, 2, 1, 1, SendMode::rendezvous, Issue::one_at_a_time).problem,
            "deadlock: stage 0 blocked in { send_activation u1.c0 }; stage 1 blocked in { send_gradient u0.c0 }; ");
  // Interleaving meets the same cycle.
  EXPECT_FALSE(simulate(Schedule::interleaved, 2, 4, 2, 1, SendMode::rendezvous, Issue::one_at_a_time).completed);
}

/// `ops` with every message moved beside its computation: a forward's receive just before it and
/// its send just after it, likewise for a backward (how pipeline_ops laid out every schedule
/// before interleaving's steady state was changed to Megatron-LM's).
std::vector<PipelineOp> messages_beside_computations(const std::vector<PipelineOp>& ops) {
  std::set<std::tuple<int, int, int>> present;  // (kind, unit, chunk)
  for (const PipelineOp& op : ops) present.insert({int(op.kind), op.micro_batch, op.chunk});
  std::vector<PipelineOp> out;
  auto add = [&](PipelineOpKind kind, const PipelineOp& of) {
    if (present.count({int(kind), of.micro_batch, of.chunk})) out.push_back({kind, of.micro_batch, of.chunk});
  };
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOpKind::forward) {
      add(PipelineOpKind::recv_activation, op);
      out.push_back(op);
      add(PipelineOpKind::send_activation, op);
    } else if (op.kind == PipelineOpKind::backward) {
      add(PipelineOpKind::recv_gradient, op);
      out.push_back(op);
      add(PipelineOpKind::send_gradient, op);
    }
  }
  return out;
}

TEST(ScheduleRendezvous, InterleavedWithMessagesBesideComputationsDeadlocksEvenBatched) {
  // Batching alone does not save the interleaved schedule: with each forward's send before the
  // backward that follows it, stage 0 (2 stages, 2 chunks, 4 micro-batches) sends a gradient
  // alone while stage 1, in a batch sending a gradient back, waits for a receive stage 0 posts
  // later. Hence Megatron-LM's steady state (both computations, then one batch of messages).
  // (With as many micro-batches as stages there is no steady state: all forwards, then all
  // backwards, which completes either way.)
  for (int stages : {2, 3, 4})
    for (int chunks : {2, 3})
      for (int k : {2, 3}) {
        std::vector<std::vector<PipelineOp>> lists;
        for (int st = 0; st < stages; ++st)
          lists.push_back(messages_beside_computations(pipeline_ops(Schedule::interleaved, stages, st, k * stages, chunks)));
        const Outcome o = simulate(lists, chunks, SendMode::rendezvous, Issue::batched);
        EXPECT_FALSE(o.completed) << stages << " stages, " << chunks << " chunks, " << k * stages << " micro-batches";
        // With buffered sends (the MPI executor that ran it) the same lists complete.
        EXPECT_TRUE(simulate(lists, chunks, SendMode::buffered, Issue::one_at_a_time).completed);
      }
  std::vector<std::vector<PipelineOp>> lists;
  for (int st = 0; st < 2; ++st)
    lists.push_back(messages_beside_computations(pipeline_ops(Schedule::interleaved, 2, st, 4, 2)));
  EXPECT_EQ(simulate(lists, 2, SendMode::rendezvous, Issue::batched).problem,
            "deadlock: stage 0 blocked in { send_gradient u0.c1 }; stage 1 blocked in { send_gradient u1.c1 }; ");
  // 1F1B, GPipe and TeraPipe already keep every message beside its computation.
  for (const Case& c : every_case()) {
    if (c.schedule == Schedule::interleaved) continue;
    for (int st = 0; st < c.stages; ++st) {
      const auto ops = pipeline_ops(c.schedule, c.stages, st, c.units, c.chunks, c.slices);
      EXPECT_EQ(messages_beside_computations(ops), ops) << name(c);
    }
  }
}

TEST(ScheduleRendezvous, OneMessageAtATimeCompletesWithBufferedSends) {
  // What the old executor relied on: MPI_Isend returns at once, so only receives block. Every
  // schedule completes then, which is why the deadlock above never showed under MPI.
  for (const Case& c : every_case()) {
    const Outcome o = simulate(c.schedule, c.stages, c.units, c.chunks, c.slices, SendMode::buffered, Issue::one_at_a_time);
    EXPECT_TRUE(o.completed) << name(c) << ": " << o.problem;
  }
}

TEST(ScheduleRendezvous, MessagesMatchedOutOfOrderAreCaught) {
  // Without tags a pair's messages meet in issue order: stage 0 of a 2-stage GPipe sending its
  // two activations in reverse would hand stage 1 micro-batch 1's activation as micro-batch 0's.
  std::vector<std::vector<PipelineOp>> lists = {pipeline_ops(Schedule::gpipe, 2, 0, 2),
                                                pipeline_ops(Schedule::gpipe, 2, 1, 2)};
  auto& ops = lists[0];
  const PipelineOp f1{PipelineOpKind::forward, 1, 0}, s0{PipelineOpKind::send_activation, 0, 0};
  // F0 F1 then both sends, micro-batch 1's first.
  ops.erase(std::find(ops.begin(), ops.end(), s0));
  ops.insert(std::find(ops.begin(), ops.end(), f1) + 2, s0);
  ASSERT_EQ(compute_order(ops), "F0 F1 B0 B1");
  const Outcome o = simulate(lists, 1, SendMode::buffered, Issue::one_at_a_time);
  EXPECT_FALSE(o.completed);
  EXPECT_EQ(o.problem, "stage 0 -> 1 message #0: send_activation u1.c0 matched with recv_activation u0.c0");
}

TEST(ScheduleRendezvous, PipelineStepsBatchEachRunOfMessages) {
  // 1F1B, 4 stages, stage 2, 3 micro-batches: R F S | R F [S R] B [S R] F [S R] B [S R] B S.
  const auto ops = pipeline_ops(Schedule::one_f_one_b, 4, 2, 3);
  std::string shape;
  for (const PipelineStep& step : pipeline_steps(ops)) {
    if (!step.communication) {
      shape += ops[step.first].kind == PipelineOpKind::forward ? "F" : "B";
      continue;
    }
    shape += "[";
    for (std::size_t i = step.first; i < step.first + step.count; ++i) {
      const PipelineOpKind k = ops[i].kind;
      shape += k == PipelineOpKind::send_activation ? "sa" : k == PipelineOpKind::send_gradient ? "sg"
             : k == PipelineOpKind::recv_activation ? "ra" : "rg";
      if (i + 1 < step.first + step.count) shape += " ";
    }
    shape += "]";
  }
  // Forward output sent with the next backward's gradient received (send_forward_recv_backward),
  // a backward's gradient sent with the next forward's input received (send_backward_recv_forward).
  EXPECT_EQ(shape, "[ra]F[sa ra]F[sa rg]B[sg ra]F[sa rg]B[sg rg]B[sg]");
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

TEST(Schedule, TeraPipeRunsSlicesForwardThenBackwardInReverse) {
  // 2 micro-batches of 3 slices: units 0-2 and 3-5.
  EXPECT_EQ(compute_order(pipeline_ops(Schedule::terapipe, 2, 1, 6, 1, 3)), "F0 F1 F2 F3 F4 F5 B2 B1 B0 B5 B4 B3");
}

}  // namespace
}  // namespace foresight::trainer
