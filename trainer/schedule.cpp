#include "trainer/schedule.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace foresight::trainer {

std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stages, int stage, int units, int chunks, int slices) {
  FORESIGHT_CHECK(stage >= 0 && stage < stages && units >= 1 && chunks >= 1 && slices >= 1 && units % slices == 0)
      << stage << "/" << stages << ", " << units << " units, " << chunks << " chunks, " << slices << " slices";
  const int virtual_stages = stages * chunks;
  std::vector<PipelineOp> ops;
  auto fwd = [&](int u, int chunk) {
    const int vs = chunk * stages + stage;
    if (vs > 0) ops.push_back({PipelineOpKind::recv_activation, u, chunk});
    ops.push_back({PipelineOpKind::forward, u, chunk});
    if (vs < virtual_stages - 1) ops.push_back({PipelineOpKind::send_activation, u, chunk});
  };
  auto bwd = [&](int u, int chunk) {
    const int vs = chunk * stages + stage;
    if (vs < virtual_stages - 1) ops.push_back({PipelineOpKind::recv_gradient, u, chunk});
    ops.push_back({PipelineOpKind::backward, u, chunk});
    if (vs > 0) ops.push_back({PipelineOpKind::send_gradient, u, chunk});
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
      for (int i = 0; i < steady; ++i) {
        fwd(unit_of(warmup + i), fchunk(warmup + i));
        bwd(unit_of(i), bchunk(i));
      }
      for (int k = steady; k < total; ++k) bwd(unit_of(k), bchunk(k));
      return ops;
    }
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
