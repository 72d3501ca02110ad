// The closed loop on the machine at hand (issue 24, `foresight validate --local`): the bundled
// trainer's CPU backend calibrated on this host (cost_models/host_profile.hpp), a set of plans for a
// small GPT that the trainer runs on local ranks, each plan's step time and peak memory per rank
// predicted by the simulator BEFORE it runs (written into its plan.json), and the comparison.
// This file holds everything but running processes (apps/cli/validate.cpp does that): the plan set,
// the local device as a cluster, the predictions and the report, so that tests can check that the
// predictions depend on nothing measured.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan_json.hpp"
#include "sim/prediction.hpp"

namespace foresight::planner {

/// The host as a cluster: one node with `ranks` devices, each one CPU rank of the trainer's CPU
/// backend priced by the profile at `profile_path` (GpuSpec::host_profile); its "peak" is the
/// fastest GEMM the profile measured and its memory the host's.
ClusterSpec local_cpu_cluster(const std::string& profile_path, int ranks);

/// One plan of the loop: a short name and what the trainer executes.
struct LoopCase {
  std::string name;  // e.g. "pp2-1f1b"
  ExecutablePlan plan;
};

/// The loop's small GPT (4 layers, hidden 64, 4 heads, sequence 64, vocabulary 256; with `moe`
/// every other MLP is 4 experts, top-2, capacity factor 1.25), trained in fp32 on synthetic data.
ModelSpec closed_loop_model(bool moe);

/// The plans for at most `max_ranks` ranks: on one rank the baseline, full and selective
/// recompute, activation offload, MoE, TeraPipe token slices; on two, tp, tp with sequence parallelism, pp with 1F1B, GPipe,
/// interleaved and TeraPipe slices, dp, dp with ZeRO-1, MoE with ep; on four (max_ranks >= 4),
/// tp x pp, pp x dp and tp x dp. Each runs `steps` steps (the first is warm-up).
std::vector<LoopCase> closed_loop_plans(int max_ranks, int steps);

/// The plan `foresight calibrate --backend cpu` runs to measure the ops' step context
/// (HostProfile::step_context): the loop's dense model on one rank at micro-batch 1 (eight
/// micro-batches a step), a plan none of closed_loop_plans runs (they all take micro-batch 2), so
/// every plan the loop checks stays a prediction.
LoopCase context_calibration_case(int steps);

/// The simulator's prediction (analytic engine) of one case on the host profile; also stored as
/// the plan's `prediction`. Made before anything runs and from the profile alone.
sim::Prediction predict_local(LoopCase& c, const std::string& profile_path);

/// What one trainer run measured (from its summary.json), or why it failed.
struct LoopMeasurement {
  std::optional<double> step_s;     // the chosen run's median step, warm-up step left out, seconds
  int steps = 0;                    // steps that median is over
  std::vector<double> run_steps_s;  // every run's median step, in round order (0: the run failed)
  std::optional<double> memory_GB;  // peak of live tensors on the fullest rank, 1e9 bytes
  std::string error;                // empty when the run succeeded
  int disturbed_runs = 0;           // runs kept although the host was slower than at calibration
  int quiet_runs = 0;               // runs with a median step that found the host within tolerance
  double host_slowdown = 0;         // the host slowdown (probe ratio, others' load) around the chosen run
};

/// The slowdown other processes imply for a run of `ranks` ranks on a host of `cores` cores, from
/// the CPU seconds they used while it ran (`others_cpu_s` over `wall_s`): the cores they kept busy
/// beyond those the run left idle, shared among its ranks (1: nothing beyond; 1 for a zero wall).
double others_load_slowdown(double others_cpu_s, double wall_s, int cores, int ranks);

/// One reading of the host probe run on several ranks (or threads) at once, from each one's time
/// (seconds), on a host of `cores` cores: the mean, unless the ranks, each on a core of its own,
/// ran more than `tolerance` (relative, slowest over quickest) apart; then the quickest one's.
/// Ranks on cores of their own slow each other only through what they share (memory bandwidth,
/// caches), and alike: at quiet times two probe processes here ran within 0.1-4% of each other
/// (session 63). A VM's vCPU can lose part of its physical core to another tenant for a minute or
/// so, with nothing in /proc/stat (steal reads 0): then its rank runs 1.3-1.6x and the other as at
/// quiet times (session 63: the probe's mean 1.24-1.37x one rank alone for a minute while two
/// trainer processes ran at 1.4-1.7x and 1.0x), a spell of the host, not the ranks' contention.
/// Beyond the core count ranks time-share cores, and the mean is the slowdown. Fewer than two
/// times: the one there is (0 for none). `at_quickest` says which was taken (the calibration counts
/// such readings).
struct ProbeReading {
  double seconds = 0;
  bool at_quickest = false;
};
ProbeReading concurrent_probe_reading(const std::vector<double>& per_rank_s, int cores, double tolerance);

/// The slowdown of `ranks` ranks run at once on a host of `cores` cores, from probe runs of one rank
/// (`alone_s`) and of `ranks` ranks (`concurrent_s`), each k-rank run timed right after a one-rank
/// run (`paired_ratios`: their quotients). Beyond the core count, where ranks time-share cores, the
/// median paired ratio. Up to it, each count at its quickest run, the k-rank run's over the one-rank
/// run's, at least 1: a shared host's slow spells (invisible in /proc/stat on a VM) lengthen some
/// runs of either count and shorten none, so a median ratio carries them (and a lowest ratio the
/// spells that met a one-rank run), while validate --local takes each plan's quickest run; and a
/// concurrent rank on its own core cannot speed another up. `other_reading` (0: none) is the same
/// slowdown read at another time (the calibration's threads around its op timing); up to the core
/// count the quieter of the two stands, since a spell can outlast every pair.
double concurrent_rank_slowdown(std::vector<double> paired_ratios, const std::vector<double>& alone_s,
                                const std::vector<double>& concurrent_s, int ranks, int cores,
                                double other_reading = 0);

/// The calibration's op timing, repeated while it ran across a change of the host's speed: `pass(k)`
/// times pass k (0, 1, ...) and returns how far the host probe's readings after it sit from those
/// before it (|after / before - 1|). Passes run until one drifts at most `most_drift`, `most_passes`
/// at most; returns the index of the steadiest pass (the first of the least drift).
int steadiest_pass(const std::function<double(int)>& pass, double most_drift, int most_passes);

/// How far a calibration's op timing is from a steady host, for steadiest_pass: the larger of
/// |after / before - 1| over the medians of the one-thread probe readings made by the calibrating
/// process just before and just after it, and how much slower the timing process's own probe
/// reference (`inside_reference_s`, the quickest tenth of its in-pass readings) is than the quickest
/// of those readings (0 when not slower). The second catches a timing process that ran slow
/// throughout while the host around it did not. FORESIGHT_CHECK on an empty side or a reading <= 0.
struct OpTimingDrift {
  double apart = 0, inside = 0;
  double drift() const { return std::max(apart, inside); }
};
OpTimingDrift op_timing_drift(const std::vector<double>& before_s, const std::vector<double>& after_s,
                              double inside_reference_s);

/// Whether the quickest of a plan's runs (median steps, seconds; 0: a failed run, ignored) is
/// corroborated by a second run within `tolerance` of it (relative). The step-context calibration
/// runs its plan until it is (calibrate --backend cpu): a slow spell can cover every run but one,
/// and then that one is slowed too, often by less than it shows (session 62: runs of 0.0636,
/// 0.0871 and 0.0830 s a step where a quiet host runs 0.0601, and a context of 1.098x instead of
/// 1.036x that predicted every 1-rank plan 3-6% slow).
bool quickest_run_corroborated(const std::vector<double>& run_steps_s, double tolerance);

/// The runs of one plan (one trainer summary per round) and the host slowdown read around each
/// (`run_slowdown`, same order; an empty list reads every run as quiet; quiet: within 1 +
/// `tolerance`, counted in quiet_runs and disturbed_runs): each run's median step time over its
/// steps but the first (warm-up); the plan's step time is the smallest of these. The smallest, not a
/// median over runs, because a shared machine's slow spells lengthen a run and never shorten one,
/// and often escape the readings around it (on the 2-core CI VM, bursts of seconds inside runs of
/// one or two; the readings themselves, 0.15 s probes, flag quick runs as busy as often as slow
/// ones), so the quickest run is the one the fewest spells touched; the host profile is the faster
/// of two passes over the ops, each sample stated at the host probe's quickest readings
/// (calibrate/cpu_bench.hpp), for the same reason. Peak memory: the largest over the runs. A
/// failed run is skipped and named.
LoopMeasurement measurement_from_summaries(const std::vector<nlohmann::json>& summaries,
                                           const std::vector<double>& run_slowdown = {}, double tolerance = 0.07);

/// {backend, host, profile, cases: [{plan, ranks, predicted_step_s, measured_step_s, error_pct,
/// predicted_mem_GB, measured_mem_GB, mem_error_pct, breakdown}], median_abs_pct, max_abs_pct,
/// mem_max_abs_pct}. error = measured / predicted - 1.
nlohmann::ordered_json closed_loop_json(const std::vector<LoopCase>& cases, const std::vector<sim::Prediction>& predicted,
                                        const std::vector<LoopMeasurement>& measured, const std::string& backend,
                                        const std::string& profile_path);

/// reports/closed-loop.md: the table, the summary figures and the command that produced them.
std::string closed_loop_markdown(const nlohmann::ordered_json& report, const std::string& command);

}  // namespace foresight::planner
