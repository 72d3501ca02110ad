// AdamW with global gradient-norm clipping and a linear warm-up + cosine decay learning rate
// (GPT-3, Brown et al. 2020 appendix B). The global norm is taken over the whole model: each
// rank sums the squares of the gradients it owns (tensor-parallel replicas and the tied
// embedding's second copy counted once), summed over every stage of data-parallel replica 0.
#pragma once

#include "trainer/backend.hpp"
#include "trainer/communicator.hpp"
#include "trainer/params.hpp"

namespace foresight::trainer {

struct OptimizerConfig {
  double lr = 1e-3;          // peak learning rate
  double min_lr = 1e-4;      // floor of the cosine decay
  int warmup_steps = 2;      // linear warm-up from lr/warmup_steps to lr
  int total_steps = 20;      // cosine decay reaches min_lr here
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1; // matrices only
  double clip_norm = 1.0;    // 0 disables clipping
};

/// Learning rate of 1-based step `step`.
double learning_rate(const OptimizerConfig& c, int step);

/// The global L2 norm of the gradients in `store`; `counts` says whether this rank's
/// contribution belongs in the sum (false on data-parallel replicas other than 0), and
/// `counts_experts` the same for MoE expert weights (true on the first expert-data-parallel
/// replica, i.e. every rank of the first expert-parallel group). Collective over `world`.
double global_grad_norm(Backend& be, const ParamStore& store, Communicator& world, bool counts,
                        bool counts_experts);
/// The same norm when the gradients were reduce-scattered (ZeRO-1, reduce_scatter_gradients):
/// every rank holds the sums of its own shard only, so each counts the part of every counted
/// parameter inside its shard (experts included: ZeRO-1 runs with ep = 1, where experts are
/// reduced over the same data-parallel group). Collective over `world`.
double sharded_grad_norm(Backend& be, const ParamStore& store, Communicator& world);

/// Clips by `grad_norm` and applies one AdamW step (1-based `step`) to the fp32 master values of
/// the elements whose optimizer state this rank holds (all of them without ZeRO; its shard with
/// ZeRO-1). The caller then brings every rank's master values up to date (ZeRO-1's all-gather) and
/// writes the working copy (ParamStore::update_working_copy).
void adamw_step(Backend& be, const ParamStore& store, const OptimizerConfig& c, int step, double grad_norm);

}  // namespace foresight::trainer
