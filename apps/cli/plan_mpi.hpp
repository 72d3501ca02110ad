// The plan search spread over MPI ranks (`mpirun -np N foresight plan ...`): every rank
// enumerates the same plans, evaluates every N-th one, rank 0 gathers and ranks them exactly as
// one process would (planner::rank_candidates), and the SimGrid re-ranking of the top K is spread
// the same way. Without mpirun (or without MPI in the build) it is the one-process search. The
// rendezvous lives here, apart from the command, as STYLE.md asks.
#pragma once

#include "planner/search.hpp"

namespace foresight::cli {

/// MPI's world when this process was started by mpirun (and the build has MPI), else a world of
/// one. Initialises MPI once per process and finalises it at exit.
class MpiWorld {
 public:
  MpiWorld();
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Ranks of this world on this node (MPI_COMM_TYPE_SHARED), to share its cores among them.
  int local_size() const { return local_size_; }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
};

/// The search over the world's ranks; rank 0's result equals planner::search_plans's. Other
/// ranks return a partial result they must not print.
planner::SearchResult distributed_search(const MpiWorld& world, const planner::SearchRequest& r,
                                         const planner::SearchProgress& progress);

}  // namespace foresight::cli
