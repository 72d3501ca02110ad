#include "sim/schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace foresight::sim {

namespace {

std::vector<ScheduledOp> gpipe(const ScheduleShape& s) {
  std::vector<ScheduledOp> ops;
  for (int mb = 0; mb < s.microbatches; ++mb)
    for (int sl = 0; sl < s.slices; ++sl) ops.push_back({Pass::forward, mb, 0, sl});
  // Backward in reverse: the last slice's gradients flow into earlier slices' keys and values.
  for (int mb = s.microbatches - 1; mb >= 0; --mb)
    for (int sl = s.slices - 1; sl >= 0; --sl) ops.push_back({Pass::backward, mb, 0, sl});
  return ops;
}

/// Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving);
/// with v = 1 it reduces to plain 1F1B.
std::vector<ScheduledOp> interleaved(const ScheduleShape& s, int stage) {
  const int p = s.stages, v = s.virtual_stages, m = s.microbatches;
  const int total = m * v;
  int warmup = (v == 1) ? (p - stage - 1) : (p - stage - 1) * 2 + (v - 1) * p;
  warmup = std::min(warmup, total);
  auto fwd = [&](int k) {
    const int group = k / (p * v), in_group = k % (p * v);
    return ScheduledOp{Pass::forward, group * p + in_group % p, in_group / p, 0};
  };
  auto bwd = [&](int k) {
    const int group = k / (p * v), in_group = k % (p * v);
    return ScheduledOp{Pass::backward, group * p + in_group % p, v - 1 - in_group / p, 0};
  };
  std::vector<ScheduledOp> ops;
  ops.reserve(std::size_t(2) * total);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back(fwd(f));
  while (f < total) {
    ops.push_back(fwd(f++));
    ops.push_back(bwd(b++));
  }
  while (b < total) ops.push_back(bwd(b++));
  return ops;
}

/// ZB-H1 as sail-sg/zero-bubble-pipeline-parallelism's branch zb-h1-quick-start runs it in
/// Megatron-LM's forward_backward_pipelining_without_interleaving (commit 95212f70): stage 0 is
/// plain 1F1B; on stage s > 0 the first s steady-state backwards and every one from the last
/// steady-state step on are split, their Ws queued (first in, first out) and popped "delayed by
/// rank": after the last steady-state backward and after each cool-down backward once s of them
/// are due, the rest at the end.
std::vector<ScheduledOp> zb_h1(const ScheduleShape& sh, int stage) {
  const int p = sh.stages, m = sh.microbatches, s = stage;
  const int warmup = std::min(p - s - 1, m), remaining = m - warmup;
  std::vector<ScheduledOp> ops;
  std::vector<int> deferred;  // queue of split backwards' micro-batches
  std::size_t popped = 0;
  auto backward = [&](int mb, bool split) {
    ops.push_back({Pass::backward, mb, 0, 0, split});
    if (split) deferred.push_back(mb);
  };
  auto weight = [&] {
    FORESIGHT_CHECK(popped < deferred.size()) << "zb-h1: no deferred weight pass on stage " << s;
    ops.push_back({Pass::weight, deferred[popped++], 0, 0});
  };
  for (int f = 0; f < warmup; ++f) ops.push_back({Pass::forward, f, 0, 0});
  for (int i = 0; i < remaining; ++i) {
    ops.push_back({Pass::forward, warmup + i, 0, 0});
    const bool last = i == remaining - 1;
    backward(i, (i < s || last) && s > 0);
    if (last && i >= s && s > 0) weight();
  }
  for (int i = 0; i < warmup; ++i) {
    backward(remaining + i, s > 0);
    if (s > 0 && remaining + i >= s) weight();
  }
  while (popped < deferred.size()) weight();
  return ops;
}

/// DualPipe as deepseek-ai/DualPipe's dualpipe.py (DualPipe.step, steps 1-8) orders one rank's
/// chunks: "phase" 0/1 there is model chunk 0/1 here on the first half of the stages and the other
/// way round on the second half; each chunk's forwards and backwards take its direction's
/// micro-batches in order; weight passes pop the split backwards first in, first out; the
/// overlapped _forward_backward_chunk is a paired forward followed by its backward.
std::vector<ScheduledOp> dualpipe(const ScheduleShape& sh, int stage) {
  const int n = sh.stages, half = n / 2, h = std::min(stage, n - 1 - stage);
  const int per_direction = sh.microbatches / 2;
  const int flip = stage >= half ? 1 : 0;
  std::vector<ScheduledOp> ops;
  int forwards[2] = {0, 0}, backwards[2] = {0, 0};
  std::vector<ScheduledOp> deferred;
  std::size_t popped = 0;
  auto forward = [&](int phase, bool paired = false) {
    const int chunk = phase ^ flip;
    ops.push_back({Pass::forward, chunk * per_direction + forwards[chunk]++, chunk, 0, false, paired});
  };
  auto backward = [&](int phase, bool split = false) {
    const int chunk = phase ^ flip;
    const ScheduledOp op{Pass::backward, chunk * per_direction + backwards[chunk]++, chunk, 0, split};
    ops.push_back(op);
    if (split) deferred.push_back({Pass::weight, op.microbatch, chunk, 0});
  };
  auto weight = [&] {
    FORESIGHT_CHECK(popped < deferred.size()) << "dualpipe: no deferred weight pass on stage " << stage;
    ops.push_back(deferred[popped++]);
  };
  const bool middle = stage == half - 1 || stage == half;
  for (int i = 0; i < (half - h - 1) * 2; ++i) forward(0);  // step 1: nF0
  for (int i = 0; i < h + 1; ++i) {                          // step 2: nF0F1
    forward(0);
    forward(1);
  }
  for (int i = 0; i < half - h - 1; ++i) {  // step 3: nB1W1F1 (zero bubble)
    backward(1, true);
    weight();
    forward(1);
  }
  for (int i = 0; i < per_direction - n + h + 1; ++i) {  // step 4 (main): nF0B1F1B0
    if (i == 0 && middle) {  // "We don't overlap these two chunks to further reduce bubble size."
      forward(0);
      backward(1);
    } else {
      forward(0, true);
      backward(1);
    }
    forward(1, true);
    backward(0);
  }
  for (int i = 0; i < half - h - 1; ++i) {  // step 5: nB1F1B0
    backward(1);
    forward(1, true);
    backward(0);
  }
  bool zb = false;  // step 6: nB1B0, the second half zero bubble
  for (int i = 0; i < h + 1; ++i) {
    if (i == (h + 1) / 2 && h % 2 == 1) zb = true;
    backward(1, zb);
    if (i == (h + 1) / 2 && h % 2 == 0) zb = true;
    backward(0, zb);
  }
  for (int i = 0; i < half - h - 1; ++i) {  // step 7: nWB0 (zero bubble)
    weight();
    backward(0, true);
  }
  while (popped < deferred.size()) weight();  // step 8: nW
  return ops;
}

}  // namespace

std::vector<ScheduledOp> stage_schedule(const ScheduleShape& s, int stage) {
  FORESIGHT_CHECK(stage >= 0 && stage < s.stages) << "stage " << stage << " of " << s.stages;
  FORESIGHT_CHECK(s.microbatches >= 1 && s.virtual_stages >= 1 && s.slices >= 1);
  FORESIGHT_CHECK(s.schedule != Schedule::zb_h1 || s.slices == 1) << "zb-h1 has no token slices";
  switch (s.schedule) {
    case Schedule::gpipe:
    case Schedule::terapipe: return gpipe(s);
    case Schedule::one_f_one_b: return interleaved(ScheduleShape{s.schedule, s.stages, s.microbatches, 1, 1}, stage);
    case Schedule::interleaved:
      FORESIGHT_CHECK(s.virtual_stages == 1 || s.microbatches % s.stages == 0)
          << "interleaving needs micro-batches (" << s.microbatches << ") in groups of p (" << s.stages << ")";
      return interleaved(s, stage);
    case Schedule::zb_h1: return zb_h1(s, stage);
    case Schedule::dualpipe:
      FORESIGHT_CHECK(s.stages % 2 == 0 && s.microbatches % 2 == 0 && s.microbatches >= 2 * s.stages)
          << "dualpipe needs an even p (" << s.stages << ") and an even m >= 2p (" << s.microbatches << ")";
      FORESIGHT_CHECK(s.slices == 1) << "dualpipe has no token slices";
      return dualpipe(s, stage);
  }
  return {};
}

}  // namespace foresight::sim
