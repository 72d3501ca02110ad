#include "trainer/schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace foresight::trainer {

std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stages, int stage, int micro_batches) {
  FORESIGHT_CHECK(stage >= 0 && stage < stages && micro_batches >= 1) << stage << "/" << stages;
  FORESIGHT_CHECK(schedule == Schedule::one_f_one_b || schedule == Schedule::gpipe) << to_string(schedule);
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<PipelineOp> ops;
  auto fwd = [&](int mb) {
    if (!first) ops.push_back({PipelineOpKind::recv_activation, mb});
    ops.push_back({PipelineOpKind::forward, mb});
    if (!last) ops.push_back({PipelineOpKind::send_activation, mb});
  };
  auto bwd = [&](int mb) {
    if (!last) ops.push_back({PipelineOpKind::recv_gradient, mb});
    ops.push_back({PipelineOpKind::backward, mb});
    if (!first) ops.push_back({PipelineOpKind::send_gradient, mb});
  };
  if (schedule == Schedule::gpipe) {
    for (int mb = 0; mb < micro_batches; ++mb) fwd(mb);
    for (int mb = 0; mb < micro_batches; ++mb) bwd(mb);
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warmup;
  for (int mb = 0; mb < warmup; ++mb) fwd(mb);
  for (int i = 0; i < steady; ++i) {
    fwd(warmup + i);
    bwd(i);
  }
  for (int i = 0; i < warmup; ++i) bwd(steady + i);
  return ops;
}

std::string compute_order(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops) {
    if (op.kind != PipelineOpKind::forward && op.kind != PipelineOpKind::backward) continue;
    if (!s.empty()) s += ' ';
    s += (op.kind == PipelineOpKind::forward ? 'F' : 'B') + std::to_string(op.micro_batch);
  }
  return s;
}

}  // namespace foresight::trainer
