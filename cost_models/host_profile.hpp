// A CPU device: the bundled trainer's CPU backend (trainer/cpu_backend.cpp) on the machine at hand,
// priced op by op from what `foresight calibrate --backend cpu` measured there (issue 24). The
// backend runs every op as single-threaded loops, one rank per process, so its cost is not a
// roofline of datasheet peaks but a per-op function of the op's size: GEMM time interpolated over
// measured shapes (per transpose variant: the loops stride differently), every other op a fitted
// fixed + per-unit time, MPI collectives between ranks of the host fitted as latency + bytes /
// bandwidth, and the slowdown the host's scheduler imposes when ranks outnumber cores.
//
// A GPU file names such a profile in `host_profile` (GpuSpec::host_profile); the execution model
// then prices layers, the embedding and head, and the optimizer step from it (ExecutionModel::host)
// and the communication model uses its MPI fits for groups inside the host.
// Left out: cache effects between consecutive ops, memory-bandwidth contention between ranks
// (folded into the measured slowdown), MPI progress while a rank computes (the trainer's sends
// complete in its waits).
#pragma once

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/units.hpp"

namespace foresight::cost_models {

/// Backend::matmul's three call patterns in the trainer: nn C = A B (forward), nt C = A B^T (input
/// gradients), tn C += A^T B (weight gradients). C is m x n, the inner dimension k.
enum class MatmulVariant { nn = 0, nt = 1, tn = 2 };

struct MatmulSample {
  double m = 0, n = 0, k = 0;
  double time_s = 0;  // median
};

/// time = fixed_s + per_unit_s * units, least squares over the measured sizes.
struct LinearFit {
  double fixed_s = 0, per_unit_s = 0;
  double time(double units) const { return fixed_s + per_unit_s * units; }
};

/// A collective between `ranks` ranks of the host through the trainer's MPI communicator; bytes
/// as the communication model counts them (cost_models/comm.hpp).
struct MeasuredCollectives {
  int ranks = 0;
  /// Indexed by foresight::Collective (all_reduce, all_gather, reduce_scatter, all_to_all,
  /// broadcast, send_recv).
  std::array<std::optional<LinearFit>, 6> fits{};
  /// The measured (bytes, seconds) the fits were made from, by bytes ascending; empty in a profile
  /// without them. Read between them rather than along the line: MPI over shared memory changes
  /// protocol with the message size (eager copies, then fragments, then a single copy), so time is
  /// not one line in bytes (session 63: an all-reduce measured 10.2 us at 16 KiB where the line
  /// through 1 KiB-4 MiB gives 4.2).
  std::array<std::vector<std::pair<double, double>>, 6> samples{};
  /// Seconds for `bytes` of collective `c` (its index) between `ranks` ranks as measured: between
  /// two samples, along the straight line joining them; below the smallest, the smallest's time
  /// (its fixed cost taken as the floor); above the largest, the largest's time
  /// plus the fit's per-byte time for the rest. Without samples, the fit. Unset without either.
  std::optional<double> time(int c, double bytes) const;
};

struct HostProfile {
  std::string source;  // the file
  std::string hostname, cpu_model, kernels;
  std::string backend = "cpu";  // the trainer backend measured (host.backend)
  int cores = 0;
  long long created_unix = 0;
  std::array<std::vector<MatmulSample>, 3> matmul;  // by MatmulVariant
  std::map<std::string, LinearFit> ops;            // by Backend method name
  double copy_GBps = 0;
  std::vector<MeasuredCollectives> mpi;          // by rank count, ascending
  std::vector<std::pair<int, double>> slowdown;  // (ranks, per-process slowdown), ascending
  /// Seconds per call of the oversubscription probe (calibrate/cpu_bench.hpp) with that many
  /// ranks at once, at calibration: the host's speed then, which `validate --local` checks again
  /// around every run. Same order as `slowdown`; 0 where not recorded.
  std::vector<double> probe_s;
  /// (threads, seconds per call) of the same probe run on that many threads of one process, three
  /// readings just before and three just after the ops were timed (the median of the six): the
  /// speed the op times describe.
  std::vector<std::pair<int, double>> ops_probe_s;
  std::vector<std::string> mpirun;               // launch template; "{ranks}" stands for the count
  /// The ops' time inside a training step over their time called alone, as `foresight calibrate
  /// --backend cpu` measures it on a declared calibration plan (planner::context_calibration_case:
  /// its step measured over its prediction from the ops alone); 1 when not measured. Session 59
  /// timed one GEMM shape 10-30% slower between a step's other calls than in a loop of its own,
  /// with caches ruled out (the code in between: branch predictors, op cache, prefetchers).
  double step_context = 1.0;
  /// The step context as the calibration read it (step_context.measured_factor), when recorded. A
  /// reading outside the plausible range in two calibrations is kept here and not used (factor 1):
  /// the host's speed was unsteady while the profile was made.
  std::optional<double> step_context_measured;
  /// True when the calibration's step-context reading was not used (see above): `validate --local`
  /// then calibrates again rather than reuse the profile.
  bool step_context_fell_back() const {
    return step_context_measured && std::abs(*step_context_measured - step_context) > 1e-9;
  }

  /// Per-process slowdown of `ranks` busy processes on this host: the measured value, linear
  /// between measured counts, ranks / cores beyond the last (time-sharing).
  double slowdown_for(int ranks) const;
  /// Fastest GEMM measured, FLOP/s (the device's "peak" for MFU figures).
  double best_gemm_flops() const;
};

/// Reads a profile written by `foresight calibrate --backend cpu`. A missing op, a non-positive
/// time or an unknown format is a SpecError naming the file and the field.
HostProfile parse_host_profile(const std::string& text, const std::string& source);
HostProfile load_host_profile(const std::string& path);
/// load_host_profile once per process and path (shared by the planner's threads).
std::shared_ptr<const HostProfile> cached_host_profile(const std::string& path);

/// The ops every layer, embedding, head and optimizer step of the trainer calls (a profile must
/// have them all).
const std::vector<std::string>& host_profile_ops();

/// Op times of the CPU backend on this host for a plan of `ranks` ranks: each measured time times
/// the slowdown of that many processes sharing the host's cores and the profile's step context.
class HostOps {
 public:
  HostOps(std::shared_ptr<const HostProfile> profile, int ranks);
  /// Inverse-distance weighting (in log m, log n, log k) of the log time per multiply-add of the
  /// 8 nearest measured shapes of the variant, times m n k.
  Seconds matmul(MatmulVariant v, double m, double n, double k) const;
  /// One call of a linear-fit op on `units` units.
  Seconds op(const std::string& name, double units) const;
  double slowdown() const { return slowdown_; }
  const HostProfile& profile() const { return *profile_; }

 private:
  std::shared_ptr<const HostProfile> profile_;
  double slowdown_ = 1.0;
};

}  // namespace foresight::cost_models
