// One experiment: a model on a cluster with a training setup and a parallel plan, and for the
// validation set, what was measured when it really ran (with its source).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "core/hardware.hpp"
#include "core/model.hpp"
#include "core/plan.hpp"

namespace foresight {

/// A published measurement of a run, in the source's own terms.
struct Measured {
  std::optional<double> iteration_s;     // seconds per iteration
  std::optional<double> tflops_per_gpu;  // TFLOP/s per GPU under flops_definition
  std::optional<double> tokens_per_s;
  std::optional<double> samples_per_s;
  std::optional<double> forward_ms;   // one forward pass (Korthikanti 2022 Table 4: one layer)
  std::optional<double> backward_ms;  // one backward pass, recompute included when the plan has it
  std::optional<double> speedup;      // iteration-time ratio baseline / this run
  std::optional<double> peak_memory_GiB;  // the most loaded GPU's peak, of kind memory_kind
  MemoryKind memory_kind = MemoryKind::allocated;
  std::string baseline;               // the experiment `speedup` is measured against (file stem)
  FlopsDefinition flops_definition = FlopsDefinition::hardware;
  std::string source;     // paper, table, figure
  std::string datapoint;  // id in shared/published/datapoints.yaml
  /// calibration: the case pins calibrated parameters (scenarios/calibration.yaml) and is not a
  /// prediction; prediction (default): everything else.
  MeasuredRole role = MeasuredRole::prediction;
};

struct Experiment {
  std::string name;  // file stem
  std::string file;  // where it was loaded from
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;
  PlanSpec plan;
  int gpus = 0;  // GPUs the run occupies (nodes * gpus_per_node unless the file says)
  std::optional<Measured> measured;
  std::string notes;  // the choices made where a source is silent, with citations
  /// Where each field was read ("plan.pp" -> file:line:col), so later checks point at the file.
  std::map<std::string, SourceLocation> locations;

  SourceLocation location_of(const std::string& field) const;
};

}  // namespace foresight
