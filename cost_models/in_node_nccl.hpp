// NCCL collectives inside one NVSwitch node as nccl-tests measured them (scenarios/collectives/
// <gpu>.yaml, written by scenarios/tools/nccl_in_node_tables.py from published tables). NCCL's
// tuner formula, which CommModel follows, is latency + bytes / bus bandwidth; measured curves do not
// follow it at every size: in the bundled 8-H100 table all-reduces of 4-64 MiB take 1.2-1.4x its
// time and all-to-alls of 1-512 MiB 1.1-1.4x, reduce-scatters of 1-4 MiB 0.8x, all-gathers
// 0.9-1.2x. CommModel scales its in-node estimate by the measured-to-formula ratio of the nearest
// measured group size (cost_models/README-comm.md, "Measured collectives inside a node").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cost_models/comm.hpp"

namespace foresight::cost_models {

/// One collective over `ranks` GPUs of a node: measured times at ascending message sizes
/// (NCCL's convention, CommModel::time).
struct InNodeCurve {
  Collective collective = Collective::all_reduce;
  int ranks = 2;
  std::vector<double> bytes, seconds;
};

struct InNodeNccl {
  std::string gpu, measured, source;  // source: where the numbers come from; measured: on what
  std::string file;                    // the file(s) read
  std::vector<InNodeCurve> curves;

  /// The curve of `c` whose group size is nearest `ranks` in log2 (the smaller on a tie) among those
  /// of at most `max_ranks` GPUs (a node's), or null when `c` was not measured on so few.
  const InNodeCurve* nearest(Collective c, int ranks, int max_ranks = 1 << 30) const;
  /// The curve's time at `message` bytes, interpolated linearly in log(bytes) and log(time) and
  /// clamped to the measured sizes (the caller scales beyond them).
  static double seconds(const InNodeCurve& curve, double message);
};

/// Reads a table; a SpecError naming file, field, value and rule for a malformed one (sizes not
/// ascending, a curve whose length differs from the sizes', a time that is not positive and finite
/// or that falls as the size grows, a group of fewer than two ranks, two curves of one collective
/// and group size, a collective the comm model does not price from measurements).
InNodeNccl load_in_node_nccl(const std::string& path);

struct ProfileData;
/// The single-node NCCL collectives `foresight calibrate` measured into a profile (kernels
/// nccl_all_reduce, nccl_all_gather, nccl_reduce_scatter, nccl_all_to_all; broadcast is not priced
/// by the comm model), one curve per collective and group size. A sweep's noise can time a message
/// faster than a smaller one; each time is lifted to the largest at or below its size, as the
/// published tables are (scenarios/tools/nccl_in_node_tables.py), so cost never falls with size.
InNodeNccl in_node_nccl_of(const ProfileData& profile);

/// What a GPU's in-node collectives cost as measured: the curves its bundled calibration profile
/// holds (scenarios/profiles/<gpu_name>.json, `foresight calibrate` on a machine with several of
/// these GPUs), and for every collective and group size it lacks, the published table
/// scenarios/collectives/<gpu_name>.yaml (whose `gpu` must be that name). Read once per process and
/// shared; null when neither has any.
std::shared_ptr<const InNodeNccl> bundled_in_node_nccl(const std::string& gpu_name);

}  // namespace foresight::cost_models
