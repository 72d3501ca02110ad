#include "sim/host_memory.hpp"

#include <algorithm>
#include <cmath>

#include "sim/schedule.hpp"

namespace foresight::sim {

namespace {

constexpr double kFloat = 4.0;  // every tensor of the trainer's CPU backend is fp32

/// Elements of the tensors one transformer layer keeps, and of its backward's working set, for a
/// unit of `S` tokens per sequence attending to `C` positions (trainer/layer.cpp).
struct LayerElements {
  double saved = 0;      // kept from the forward to the backward (under the plan's recompute)
  double full = 0;       // what an un-recomputed layer keeps (recomputed in the backward)
  double backward = 0;   // temporaries alive at once inside layer_backward
  double forward = 0;    // temporaries alive at once inside layer_forward
};

LayerElements layer_elements(const ModelSpec& m, const PlanSpec& p, double S, double C, bool moe_layer,
                             Recompute recompute) {
  const double t = p.tp, b = p.micro_batch, N = b * S, H = m.hidden, heads = double(m.heads) / t;
  const double HD = heads * m.head_dim(), F = double(m.ffn_hidden) / t;
  const bool sp = p.sequence_parallel && t > 1;
  const double n = sp ? N / t : N;
  const double past = C - S;
  const double core = b * heads * S * C + N * HD;  // probs and attention output
  double mlp = 2 * N * F;                          // fc1 and GeLU outputs
  double mlp_backward = N * F + N * H;             // dfc1 (matmul_dgelu: no separate dgelu), the partial input gradient
  if (moe_layer && m.moe) {
    // trainer/moe.cpp keeps the experts' input rows, their FC1 and GeLU outputs and the combined
    // rows (E x capacity rows on every rank); its backward holds the gradients of the combined,
    // returned and dispatched rows, one expert's FC1 gradient and the input gradient.
    const MoeSpec& e = *m.moe;
    const double cap = std::ceil(e.capacity_factor * N * e.top_k / e.experts - 1e-9), rows = e.experts * cap;
    const double Fe = double(m.expert_ffn());
    mlp = 2 * rows * H + 2 * rows * Fe;
    mlp_backward = 4 * rows * H + cap * Fe + N * H + N * e.experts;
  }
  LayerElements L;
  // a, x1, c, out (n x h each), two norms' mean and rstd, QKV, the core, FC1/GeLU (or the MoE's),
  // and for a later TeraPipe slice the prefix-joined K/V.
  L.full = 4 * n * H + 4 * n + 3 * N * HD + core + mlp + (past > 0 ? b * C * 3 * HD : 0.0);
  switch (recompute) {
    case Recompute::none: L.saved = L.full; break;
    case Recompute::selective: L.saved = L.full - core; break;
    case Recompute::full: L.saved = n * H + (past > 0 ? b * past * 3 * HD : 0.0); break;  // input (+ cached K/V)
    case Recompute::selective_op:  // check_plan refuses it for the trainer's framework
      FORESIGHT_CHECK(false) << "per-op selective recompute reached the trainer's memory model";
      break;
  }
  const double gather = sp ? N * H : 0.0;
  L.forward = gather + N * H;  // a gathered input and the row-parallel partial output
  // The attention half of the backward: dx1, d(attention output), dQKV, the partial input
  // gradient and dx, with the incoming gradient; the MLP half's temporaries are gone by then.
  const double attention_backward = 2 * n * H + N * HD + 3 * N * HD + N * H + gather + n * H;
  L.backward = std::max(mlp_backward + gather + n * H, attention_backward) +
               (recompute == Recompute::selective ? core : 0.0) + (past > 0 ? b * C * 3 * HD : 0.0);
  if (recompute == Recompute::full) L.backward += L.full;  // the layer re-run before its backward
  return L;
}

}  // namespace

std::vector<cost_models::MemoryBreakdown> host_memory_per_stage(const Experiment& e,
                                                                const cost_models::ExecutionModel& x) {
  const ModelSpec& m = e.model;
  const PlanSpec& p = e.plan;
  const int micro_batches = p.micro_batches(e.training);
  const int v = p.model_chunks();
  const std::vector<int> slices =
      p.schedule == Schedule::terapipe && !p.token_slices.empty() ? p.token_slices : std::vector<int>{m.seq_len};
  const double t = p.tp, H = m.hidden, V = double(m.vocab) / t;
  const bool sp = p.sequence_parallel && t > 1;
  std::vector<cost_models::MemoryBreakdown> out;
  for (int s = 0; s < p.pp; ++s) {
    const cost_models::StageParameters params = cost_models::parameters_on_gpu(*x.framework, m, p, s);
    const double P = params.dense + params.expert;
    const double shard = p.zero >= 1 ? double(p.shard_ways()) : 1.0;
    cost_models::MemoryBreakdown mem;
    mem.weights = Bytes(kFloat * P);
    mem.grads = Bytes(kFloat * P);
    mem.optimizer = Bytes(2 * kFloat * P / shard);

    ScheduleShape shape{.schedule = p.schedule, .stages = p.pp, .microbatches = micro_batches,
                        .virtual_stages = v, .slices = int(slices.size())};
    // Pipeline messages go out in batches (trainer.cpp: one exchange per run of sends and
    // receives, completed before the next computation), so an output waits only until the next
    // exchange. Interleaved steady state as Megatron-LM runs it (trainer/schedule.cpp): both
    // inputs received, forward and backward computed, then both outputs sent; everywhere else an
    // exchange sits between two computations whenever either side has a message.
    const std::vector<ScheduledOp> ops = stage_schedule(shape, s);
    auto boundaries = [&](const ScheduledOp& op) {
      const int segment = shape.segment(s, op.chunk);
      return std::pair<bool, bool>{segment == 0, segment == shape.segments() - 1};
    };
    auto receives = [&](const ScheduledOp& op) {
      const auto [first, last] = boundaries(op);
      if (op.pass == Pass::weight) return false;
      return op.pass == Pass::forward ? !first : !last;
    };
    auto sends = [&](const ScheduledOp& op) {
      const auto [first, last] = boundaries(op);
      if (op.pass == Pass::weight) return false;
      return op.pass == Pass::forward ? !last : !first;
    };
    auto paired = [&](std::size_t k) {  // a steady-state forward batched with the next backward
      return p.schedule == Schedule::interleaved && k + 1 < ops.size() && ops[k].pass == Pass::forward &&
             ops[k + 1].pass == Pass::backward;
    };
    double held = 0, pending = 0, peak = 0;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const ScheduledOp& op = ops[k];
      if (op.pass == Pass::weight) continue;  // (zero-bubble schedules; the trainer runs none)
      const bool second_of_pair = k > 0 && paired(k - 1);
      const bool after_send = k > 0 && (sends(ops[k - 1]) || (k > 1 && paired(k - 2) && sends(ops[k - 2])));
      const bool exchange_before =
          !second_of_pair && (after_send || receives(op) || (paired(k) && receives(ops[k + 1])));
      if (exchange_before) pending = 0;
      // The backward's gradient, received with the forward's input before the pair.
      const double early = paired(k) && receives(ops[k + 1]) ? 1.0 : 0.0;
      const auto [first, last] = boundaries(op);
      const double S = slices[std::size_t(op.slice)];
      double C = 0;
      for (int i = 0; i <= op.slice; ++i) C += slices[std::size_t(i)];
      const double N = p.micro_batch * S, n = sp ? N / t : N;
      // The unit's stash: its input, each layer's tensors (an offloaded layer keeps only what the
      // next layer reads), the head's norm output, gathered input, logits, max and sums.
      // Per layer: what it keeps until its backward (an offloaded layer only its output: the rest,
      // and for the chunk's first layer its input, waits in the host store), the working set of its
      // pass, and what comes back from the host before its backward.
      struct Kept {
        double kept = 0, working = 0, restored = 0;
      };
      std::vector<Kept> kept;
      const std::vector<int> chunk = cost_models::chunk_layers(m, p, s, op.chunk);
      const double offloaded = std::round(p.offload.activations * double(chunk.size()));
      const bool input_offloaded = offloaded > 0;
      double unit = input_offloaded ? 0.0 : n * H, head_backward = 0, forward_working = 0;
      for (int l = 0; l < int(chunk.size()); ++l) {
        const int layer = chunk[std::size_t(l)];
        const bool moe_layer = m.is_moe_layer(layer);
        Recompute r = p.recompute;
        if (p.recompute_layers > 0) r = l < p.recompute_layers ? Recompute::full : Recompute::none;
        const LayerElements L = layer_elements(m, p, S, C, moe_layer, r);
        const bool off = l < offloaded;
        kept.push_back({off ? n * H : L.saved, L.backward, off ? L.saved - n * H + (l == 0 ? n * H : 0.0) : 0.0});
        unit += kept.back().kept;
        forward_working = std::max(forward_working, L.forward);
      }
      if (last) {
        unit += n * H + 2 * n + (sp ? N * H : 0.0) + N * V + 3 * N;
        head_backward = N * V + N * H + 2 * n * H;  // dlogits, the partial input gradient, dx
      }
      if (first && sp) forward_working = std::max(forward_working, N * H);  // the embedding before its reduce-scatter
      if (op.pass == Pass::forward) {
        held += unit;
        peak = std::max(peak, held + pending + early * n * H + forward_working);
        if (!last) pending += n * H;  // the output, until the next exchange sends it
      } else {
        // The head's backward with every layer still kept, then the layers in reverse, each freeing
        // what it kept once its backward is done; the incoming gradient (n x h) throughout.
        const double incoming = last ? 0.0 : n * H;
        double now = held + pending + incoming;
        peak = std::max(peak, now + head_backward);
        for (int l = int(kept.size()) - 1; l >= 0; --l) {
          const Kept& k = kept[std::size_t(l)];
          peak = std::max(peak, now + k.restored + k.working);
          now -= k.kept;
        }
        held -= unit;
        if (!first) pending += n * H;
      }
    }
    mem.activations = Bytes(kFloat * peak);
    out.push_back(mem);
  }
  return out;
}

}  // namespace foresight::sim
