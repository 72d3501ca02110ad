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

}  // namespace

std::vector<ScheduledOp> stage_schedule(const ScheduleShape& s, int stage) {
  FORESIGHT_CHECK(stage >= 0 && stage < s.stages) << "stage " << stage << " of " << s.stages;
  FORESIGHT_CHECK(s.microbatches >= 1 && s.virtual_stages >= 1 && s.slices >= 1);
  switch (s.schedule) {
    case Schedule::gpipe:
    case Schedule::terapipe: return gpipe(s);
    case Schedule::one_f_one_b: return interleaved(ScheduleShape{s.schedule, s.stages, s.microbatches, 1, 1}, stage);
    case Schedule::interleaved:
      FORESIGHT_CHECK(s.virtual_stages == 1 || s.microbatches % s.stages == 0)
          << "interleaving needs micro-batches (" << s.microbatches << ") in groups of p (" << s.stages << ")";
      return interleaved(s, stage);
  }
  return {};
}

}  // namespace foresight::sim
