// `foresight calibrate --backend cpu` (issue 24): times the bundled trainer's CPU backend
// (trainer/cpu_backend.cpp, the kernels foresight-train runs) op by op on this host and fits what the
// CPU device's cost model reads (cost_models/host_profile.hpp, format foresight-cpu-profile/1):
// GEMMs per transpose variant over a log2 grid of shapes, every other op as fixed + per-unit time,
// the host's copy bandwidth. The MPI collectives and the slowdown of concurrent ranks are measured
// by foresight-commbench under mpirun (trainer/commbench_main.cpp), through the trainer's own
// MPI communicator, with the same launch line foresight-train is run with.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace foresight::trainer {
class Backend;
}

namespace foresight::calibrate {

/// time = fixed_s + per_unit_s * units, least squares relative to each time (small and large
/// sizes count alike); an intercept that comes out negative is refitted through the origin.
struct LinearFitResult {
  double fixed_s = 0, per_unit_s = 0;
  double max_rel_residual = 0;  // largest |fit / measured - 1| over the samples
};
LinearFitResult fit_linear(const std::vector<double>& units, const std::vector<double>& times);

/// The collectives of several foresight-commbench launches (each its "collectives" object:
/// {name: {fixed_s, per_byte_s, samples: [{bytes, time_s}]}}) as one: each size at its quickest
/// launch, refitted. A launch's state on a shared VM holds for the whole run (two ranks landing
/// where they slow each other: every collective's fixed cost ~50 us instead of ~5 us, in about
/// half of the launches one afternoon), and validate --local keeps each plan's quickest run: the
/// calibration reads the same state. FORESIGHT_CHECK on launches that timed different sizes.
nlohmann::ordered_json quickest_collectives(const std::vector<nlohmann::ordered_json>& launches);

/// Median of `reps` timed calls of `f` after one warm-up call, seconds (steady_clock).
double median_time(const std::function<void()>& f, int reps);

/// One timing of a sample, seconds per call, and the index of the host probe's reading taken
/// before it (-1: no probe).
struct ProbedTiming {
  double time_s = 0;
  long reading = -1;
};

/// A sample's time from its timings (one per round; every op but the GEMMs has one): each timing
/// divided by the probe's time around it (the mean of its reading and the next) over `reference_s`
/// where that ratio is above 1 (never multiplied; none without a reading or a reference), then the
/// median (the mean of the middle two for an even count). The largest ratio seen is kept in
/// *largest_scale when given. FORESIGHT_CHECK on no timing or a reading with no next one.
double settled_time(const std::vector<ProbedTiming>& timings, const std::vector<double>& readings, double reference_s,
                    double* largest_scale);

struct CpuBenchOptions {
  bool quick = false;  // a smaller GEMM grid (smoke tests)
  /// A short reading of the host's speed, seconds per call of a fixed GEMM (probe_median_seconds);
  /// none on a GPU backend. When set, measure_backend reads it about every half second of timing
  /// and states every sample at the host's quickest readings (see measure_backend).
  std::function<double()> host_probe;
};

/// The ops of `be` (the trainer's CPU backend, or its CUDA backend in foresight-commbench --ops),
/// each call timed as a step meets it (calls back to back, `sync` waited for once per group); the
/// GEMM grid in rounds (five, three with o.quick), each shape the median of its rounds.
/// With o.host_probe, each sample timed while the probe read slower than its reference (the 10th
/// percentile of all readings) is divided by that ratio (never multiplied), and the result carries
/// "host_probe": {reference_s, readings, largest_scale}: a shared machine's slow spell, which can
/// outlast a whole pass, then lengthens no op time.
nlohmann::ordered_json measure_backend(trainer::Backend& be, const std::function<void()>& sync, const CpuBenchOptions& o,
                                       std::ostream& log);

/// The CPU backend's ops on this process's core: {"ops": {matmul_nn|nt|tn: {samples}, <op>: {unit,
/// fixed_s, per_unit_s, samples}}, "memory": {copy_GBps}, "host_probe": {...}}, read against the
/// host probe (probe_median_seconds) unless o.host_probe says otherwise. Progress lines go to `log`.
nlohmann::ordered_json measure_cpu_backend(const CpuBenchOptions& o, std::ostream& log);

/// The oversubscription probe: a GEMM of the backend (about 2 ms on one core) called for
/// `duration_s` of wall time; seconds per call.
double slowdown_probe_seconds(double duration_s);

/// The same GEMM timed call by call, 15 calls after a warm-up: the median call, seconds (the host
/// probe measure_cpu_backend reads among its op samples).
double probe_median_seconds();

}  // namespace foresight::calibrate
