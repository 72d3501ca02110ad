#include "trainer/layout.hpp"

#include "core/error.hpp"

namespace foresight::trainer {

int RankLayout::world_rank(int t, int p, int d) const {
  FORESIGHT_CHECK(t >= 0 && t < tp && p >= 0 && p < pp && d >= 0 && d < dp) << "coordinates " << t << "," << p << "," << d;
  return placement == Placement::tp_dp_pp ? t + tp * (d + dp * p) : t + tp * (p + pp * d);
}

RankLayout make_layout(const PlanSpec& plan, int rank) {
  RankLayout l;
  l.tp = plan.tp;
  l.pp = plan.pp;
  l.dp = plan.dp;
  l.placement = plan.placement;
  l.rank = rank;
  FORESIGHT_CHECK(rank >= 0 && rank < l.world_size()) << "rank " << rank << " of " << l.world_size();
  l.tp_rank = rank % l.tp;
  const int outer = rank / l.tp;
  if (l.placement == Placement::tp_dp_pp) {
    l.dp_rank = outer % l.dp;
    l.pp_rank = outer / l.dp;
  } else {
    l.pp_rank = outer % l.pp;
    l.dp_rank = outer / l.pp;
  }
  return l;
}

}  // namespace foresight::trainer
