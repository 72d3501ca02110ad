// Loading scenario files: GPUs, clusters, models and experiments (DESIGN.md "The scenario files").
// A section may be written inline or as a reference to another file (`model: ../models/x.yaml`,
// relative to the referring file) or by bare name (`gpu: a100-sxm4-80gb`, looked up in the sibling
// folder of the scenario tree, then in the bundled library). Every error is a SpecError with
// file:line:col; the loaded experiment has passed check_plan().
#pragma once

#include <string>

#include "core/experiment.hpp"

namespace foresight {

/// The bundled scenario library: $FORESIGHT_SCENARIOS if set, else the source tree's scenarios/.
std::string scenarios_dir();

/// A path as given, or a bare name looked up as <scenarios>/<kind>/<name>.yaml ("experiments").
/// Throws SpecError naming both places when neither exists.
std::string resolve_scenario(const std::string& kind, const std::string& name_or_path);

GpuSpec load_gpu(const std::string& path);
ClusterSpec load_cluster(const std::string& path);
ModelSpec load_model(const std::string& path);
Experiment load_experiment(const std::string& path);

/// The same from YAML text already in memory: `path` names it in errors and anchors its relative
/// references, but is not read.
GpuSpec parse_gpu(const std::string& yaml, const std::string& path);
ClusterSpec parse_cluster(const std::string& yaml, const std::string& path);
ModelSpec parse_model(const std::string& yaml, const std::string& path);
Experiment parse_experiment(const std::string& yaml, const std::string& path);

/// Checks an experiment's plan and throws SpecError at the offending field's location.
void validate_experiment(const Experiment& e);

}  // namespace foresight
