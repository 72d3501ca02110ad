#include "trainer/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace foresight::trainer {

namespace {
/// The elements [first, last) of the flat buffers where parameter p lies inside this rank's
/// optimizer shard (a shard may cut a parameter; first >= last: none of it).
std::pair<std::int64_t, std::int64_t> part_in_shard(const ParamStore& store, const Param& p) {
  const std::int64_t lo = store.state_first(), hi = lo + store.first_moments().numel();
  return {std::max(lo, p.offset), std::min(hi, p.offset + p.value.numel())};
}
}  // namespace

double learning_rate(const OptimizerConfig& c, int step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) return c.lr * step / c.warmup_steps;
  const int decay_steps = std::max(1, c.total_steps - c.warmup_steps);
  const double progress = std::clamp(double(step - c.warmup_steps) / decay_steps, 0.0, 1.0);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double global_grad_norm(Backend& be, const ParamStore& store, Communicator& world, bool counts,
                        bool counts_experts) {
  std::vector<Tensor> grads;
  for (int i = 0; i < store.size(); ++i)
    if (store[i].decl.in_grad_norm && (store[i].decl.expert ? counts_experts : counts)) grads.push_back(store[i].grad);
  double sq = 0;
  for (double s : be.sum_squares_many(grads)) sq += s;  // in parameter order, as one by one
  double v[1] = {sq};
  world.all_reduce(v, ReduceOp::sum);
  return std::sqrt(v[0]);
}

double sharded_grad_norm(Backend& be, const ParamStore& store, Communicator& world) {
  std::vector<Tensor> parts;
  for (int i = 0; i < store.size(); ++i) {
    const auto [first, last] = part_in_shard(store, store[i]);
    if (store[i].decl.in_grad_norm && first < last) parts.push_back(store.grads().row_slice(first, last - first));
  }
  double sq = 0;
  for (double s : be.sum_squares_many(parts)) sq += s;
  double v[1] = {sq};
  world.all_reduce(v, ReduceOp::sum);
  return std::sqrt(v[0]);
}

void adamw_step(Backend& be, const ParamStore& store, const OptimizerConfig& c, int step, double grad_norm) {
  // Megatron-LM / PyTorch clip_grad_norm_: scale by clip / (norm + 1e-6) when the norm exceeds it.
  const double scale = (c.clip_norm > 0 && grad_norm > c.clip_norm) ? c.clip_norm / (grad_norm + 1e-6) : 1.0;
  const std::int64_t lo = store.state_first();
  const Tensor values = store.values();
  for (int i = 0; i < store.size(); ++i) {
    const Param& p = store[i];
    const auto [first, last] = part_in_shard(store, p);
    if (first >= last) continue;
    be.adamw(values.row_slice(first, last - first), store.grads().row_slice(first, last - first),
             store.first_moments().row_slice(first - lo, last - first),
             store.second_moments().row_slice(first - lo, last - first),
             AdamWStep{.lr = float(learning_rate(c, step)),
                       .beta1 = float(c.beta1),
                       .beta2 = float(c.beta2),
                       .eps = float(c.eps),
                       .weight_decay = p.decl.weight_decay ? float(c.weight_decay) : 0.0f,
                       .grad_scale = float(scale),
                       .step = step});
  }
}

}  // namespace foresight::trainer
