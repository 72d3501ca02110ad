// What a simulation predicts for one experiment: iteration time, throughput, MFU/HFU, where the
// time went (on the stage that sets the pace) and memory per GPU per stage. Its field list is
// written once (prediction_sections) and drives both the console table and the JSON.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/report.hpp"
#include "core/units.hpp"
#include "cost_models/calibrated.hpp"
#include "cost_models/device_spread.hpp"
#include "cost_models/memory.hpp"

namespace foresight::sim {

using foresight::EngineKind;  // core/enums.hpp

/// Where one iteration's time went on the critical stage; the parts sum to the iteration time.
struct TimeBreakdown {
  Seconds compute;           // forward and backward passes (model FLOPs)
  Seconds recompute;         // activation recomputation
  Seconds host;              // the GPU waiting for the framework's host work (calibrated overheads)
  Seconds tp_comm;           // tensor/sequence-parallel collectives (blocking)
  Seconds ep_comm;           // MoE all-to-all
  Seconds cp_comm;           // context parallelism's K/V exchange, the part attention does not hide
  Seconds pp_comm_exposed;   // pipeline transfers the compute stream waited for or was blocked by
  Seconds dp_comm_exposed;   // data-parallel gradient sync not hidden behind compute (with pp > 1, also
                             // the sum of a tied embedding's first- and last-stage copies)
  Seconds optimizer;         // the optimizer step
  Seconds offload_stall;     // waiting for activations prefetched from host memory
  Seconds bubble;            // pipeline fill and drain
  Seconds total() const;
};

struct Prediction {
  std::string experiment;
  EngineKind engine = EngineKind::analytic;
  Seconds iteration;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (no recompute) per second per GPU, in TFLOP/s
  double hw_tflops_per_gpu = 0;  // hardware FLOPs (with recompute), TFLOP/s
  double mfu = 0;                // model FLOPs utilisation of the dtype's dense peak, 0..1
  double hfu = 0;                // hardware FLOPs utilisation
  int critical_stage = 0;
  TimeBreakdown breakdown;
  std::vector<cost_models::MemoryBreakdown> memory_per_stage;
  int most_loaded_stage = 0;
  Bytes device_memory;  // what one GPU has
  int tp = 1, pp = 1, dp = 1, cp = 1;
  std::string framework;  // the framework entry and version the prediction assumes
  std::string attention;  // the attention kernel both compute and memory priced
  std::string profile;    // what the calibration profile contributed
  std::string collectives;  // how in-node collectives were priced (CommModel::in_node_pricing)
  /// The calibrated parameters in effect (scenarios/calibration.yaml), by name: the ones whose
  /// scope (framework, GPU, precision, ZeRO stage) the experiment falls in.
  std::vector<std::string> calibrated_parameters;
  cost_models::SlowestDevice slowest;  // the slowest of the plan's GPUs (applied to compute)
  /// The error bar (cost_models::ErrorBand): the iteration time measured runs of this kind took
  /// relative to their prediction, 10th to 90th percentile; unset where no band applies.
  std::optional<cost_models::ErrorBand> band;
  Seconds iteration_low() const { return band ? iteration * band->lo : iteration; }
  Seconds iteration_high() const { return band ? iteration * band->hi : iteration; }
  /// "1.70 - 2.10 s (10th-90th percentile of 24 validation cases, pytorch on compute capability 9)".
  std::string range_text() const;

  /// With anything offloaded (plan.offload): the host memory the plan's GPUs on one node need for
  /// it (cost_models::OffloadCost::host_memory_per_node of the most demanding stage, as if every
  /// GPU of the node held that stage), and what a node has (host.memory_GB; zero where the cluster
  /// does not state it, and then nothing is checked). Both zero without offload.
  Bytes host_memory_needed;
  Bytes host_memory;

  /// Whether the most loaded GPU's memory fits in the device and the offloaded state in the
  /// node's host memory; by how much each does not.
  bool fits() const;
  Bytes memory_shortfall() const;
  Bytes host_memory_shortfall() const;
  /// "stage 0 needs 122.8 GB per GPU, the GPU has 85.9 GB: 36.9 GB short", and or only "the
  /// offload needs 2100.0 GB of host memory per node, a node has 2040.0 GB: 60.0 GB short"
  /// (empty when it fits).
  std::string memory_verdict() const;
};

/// The console/JSON field table of a prediction.
std::vector<Section> prediction_sections(const Prediction& p);

/// One GPU's memory as JSON, in GB: {weights, grads, optimizer, activations, buffers, headroom, total}.
nlohmann::ordered_json memory_json(const cost_models::MemoryBreakdown& m);

/// Sanity checks after every simulation (STYLE.md item 7); returns the broken ones, empty if sound.
std::vector<std::string> check_prediction(const Prediction& p);

}  // namespace foresight::sim

