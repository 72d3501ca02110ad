// Where a rank sits in the plan's grid: its tensor-, data- and pipeline-parallel coordinates, from
// the plan's placement (rank order, innermost first: tp-dp-pp as Megatron-LM, or tp-pp-dp), and
// the world ranks of its neighbours. Pure arithmetic, no communication.
#pragma once

#include "core/plan.hpp"

namespace foresight::trainer {

struct RankLayout {
  int tp = 1, pp = 1, dp = 1;  // degrees
  Placement placement = Placement::tp_dp_pp;
  int rank = 0;                // world rank
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;

  /// The world rank at the given coordinates.
  int world_rank(int tp_index, int pp_index, int dp_index) const;
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
  int prev_stage_rank() const { return world_rank(tp_rank, pp_rank - 1, dp_rank); }
  int next_stage_rank() const { return world_rank(tp_rank, pp_rank + 1, dp_rank); }
  int world_size() const { return tp * pp * dp; }
};

/// The layout of world rank `rank` under `plan`; rank must lie in [0, plan.gpus()).
RankLayout make_layout(const PlanSpec& plan, int rank);

}  // namespace foresight::trainer
