// Built without MPI: the world is one process and the search is the one-process search.
#include "apps/cli/plan_mpi.hpp"

namespace foresight::cli {

MpiWorld::MpiWorld() = default;

planner::SearchResult distributed_search(const MpiWorld&, const planner::SearchRequest& r,
                                         const planner::SearchProgress& progress) {
  return planner::search_plans(r, progress);
}

}  // namespace foresight::cli
