#include "trainer/schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace foresight::trainer {

std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stages, int stage, int units, int chunks, int slices) {
  FORESIGHT_CHECK(stage >= 0 && stage < stages && units >= 1 && chunks >= 1 && slices >= 1 && units % slices == 0)
      << stage << "/" << stages << ", " << units << " units, " << chunks << " chunks, " << slices << " slices";
  const int virtual_stages = stages * chunks;
  std::vector<PipelineOp> ops;
  // A forward (backward) is its input's receive, the computation and its output's send; the
  // first (last) virtual stage has no input activation (gradient) to receive nor gradient
  // (activation) to send.
  auto first_vs = [&](int chunk) { return chunk * stages + stage == 0; };
  auto last_vs = [&](int chunk) { return chunk * stages + stage == virtual_stages - 1; };
  auto op = [&](PipelineOpKind kind, int u, int chunk) { ops.push_back({kind, u, chunk}); };
  auto fwd = [&](int u, int chunk) {
    if (!first_vs(chunk)) op(PipelineOpKind::recv_activation, u, chunk);
    op(PipelineOpKind::forward, u, chunk);
    if (!last_vs(chunk)) op(PipelineOpKind::send_activation, u, chunk);
  };
  auto bwd = [&](int u, int chunk) {
    if (!last_vs(chunk)) op(PipelineOpKind::recv_gradient, u, chunk);
    op(PipelineOpKind::backward, u, chunk);
    if (!first_vs(chunk)) op(PipelineOpKind::send_gradient, u, chunk);
  };
  switch (schedule) {
    case Schedule::gpipe:
      FORESIGHT_CHECK(chunks == 1 && slices == 1) << "gpipe with chunks or slices";
      for (int u = 0; u < units; ++u) fwd(u, 0);
      for (int u = 0; u < units; ++u) bwd(u, 0);
      return ops;
    case Schedule::terapipe:
      FORESIGHT_CHECK(chunks == 1) << "terapipe with chunks";
      for (int u = 0; u < units; ++u) fwd(u, 0);
      for (int mb = 0; mb < units / slices; ++mb)
        for (int s = slices - 1; s >= 0; --s) bwd(mb * slices + s, 0);
      return ops;
    case Schedule::one_f_one_b: {
      FORESIGHT_CHECK(chunks == 1 && slices == 1) << "1f1b with chunks or slices";
      const int warmup = std::min(stages - stage - 1, units);
      const int steady = units - warmup;
      for (int u = 0; u < warmup; ++u) fwd(u, 0);
      for (int i = 0; i < steady; ++i) {
        fwd(warmup + i, 0);
        bwd(i, 0);
      }
      for (int i = 0; i < warmup; ++i) bwd(steady + i, 0);
      return ops;
    }
    case Schedule::interleaved: {
      FORESIGHT_CHECK(slices == 1 && units % stages == 0) << units << " micro-batches over " << stages << " stages";
      // The k-th forward (backward) of this stage: micro-batches advance in groups of `stages`,
      // each group passing through every chunk (in reverse for the backward) before the next.
      const int group = stages * chunks, total = units * chunks;
      auto unit_of = [&](int k) { return (k / group) * stages + k % stages; };
      auto fchunk = [&](int k) { return (k % group) / stages; };
      auto bchunk = [&](int k) { return chunks - 1 - (k % group) / stages; };
      int warmup = units == stages ? total : std::min(total, 2 * (stages - stage - 1) + (chunks - 1) * stages);
      const int steady = total - warmup;
      for (int k = 0; k < warmup; ++k) fwd(unit_of(k), fchunk(k));
      // Steady state as Megatron-LM runs it: both inputs received, the forward and the backward
      // computed, then both outputs sent, so that the sends and the next iteration's receives
      // form one batch (send_forward_backward_recv_forward_backward). Sending the forward's
      // output before the backward instead deadlocks once sends wait for their receives: a stage
      // then sends a gradient alone while its successor, in a batch that also sends a gradient
      // back, waits for a receive the first stage posts only later (schedule_test).
      for (int i = 0; i < steady; ++i) {
        const int fu = unit_of(warmup + i), fc = fchunk(warmup + i), bu = unit_of(i), bc = bchunk(i);
        if (!first_vs(fc)) op(PipelineOpKind::recv_activation, fu, fc);
        if (!last_vs(bc)) op(PipelineOpKind::recv_gradient, bu, bc);
        op(PipelineOpKind::forward, fu, fc);
        op(PipelineOpKind::backward, bu, bc);
        if (!last_vs(fc)) op(PipelineOpKind::send_activation, fu, fc);
        if (!first_vs(bc)) op(PipelineOpKind::send_gradient, bu, bc);
      }
      for (int k = steady; k < total; ++k) bwd(unit_of(k), bchunk(k));
      return ops;
    }
    case Schedule::zb_h1:
    case Schedule::dualpipe: break;  // refused when the plan is read (trainer.cpp)
  }
  FORESIGHT_CHECK(false) << "schedule " << to_string(schedule);
  return ops;
}

PipelineMessage pipeline_message(const PipelineOp& op, int stages, int stage, int chunks) {
  const int vs = op.chunk * stages + stage, virtual_stages = stages * chunks;
  int boundary = 0, peer = 0;  // boundary b lies between virtual stages b and b+1
  bool gradient = false;
  switch (op.kind) {
    case PipelineOpKind::send_activation: boundary = vs, peer = stage + 1, gradient = false; break;
    case PipelineOpKind::recv_activation: boundary = vs - 1, peer = stage - 1, gradient = false; break;
    case PipelineOpKind::send_gradient: boundary = vs - 1, peer = stage - 1, gradient = true; break;
    case PipelineOpKind::recv_gradient: boundary = vs, peer = stage + 1, gradient = true; break;
    default: FORESIGHT_CHECK(false) << "not a message";
  }
  FORESIGHT_CHECK(boundary >= 0 && boundary < virtual_stages - 1) << "boundary " << boundary;
  return PipelineMessage{.peer_stage = (peer + stages) % stages,
                         .tag = (op.micro_batch * virtual_stages + boundary) * 2 + (gradient ? 1 : 0)};
}

bool is_message(PipelineOpKind kind) {
  return kind != PipelineOpKind::forward && kind != PipelineOpKind::backward;
}

std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineOp>& ops) {
  std::vector<PipelineStep> steps;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const bool message = is_message(ops[i].kind);
    if (message && !steps.empty() && steps.back().communication && steps.back().first + steps.back().count == i)
      ++steps.back().count;
    else
      steps.push_back(PipelineStep{.first = i, .count = 1, .communication = message});
  }
  return steps;
}

std::string compute_order(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops) {
    if (op.kind != PipelineOpKind::forward && op.kind != PipelineOpKind::backward) continue;
    if (!s.empty()) s += ' ';
    s += (op.kind == PipelineOpKind::forward ? 'F' : 'B') + std::to_string(op.micro_batch);
    if (op.chunk > 0) {
      // Appended piecewise: g++ 12 warns falsely (-Wrestrict) on "." + std::to_string(...).
      s += '.';
      s += std::to_string(op.chunk);
    }
  }
  return s;
}

}  // namespace foresight::trainer
