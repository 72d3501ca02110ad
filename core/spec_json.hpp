// Specs as JSON (for --json output and plan.json): one function per struct, field names as in the
// scenario files so a JSON dump reads like the YAML that produced it.
#pragma once

#include <nlohmann/json.hpp>

#include "core/experiment.hpp"

namespace foresight {

nlohmann::ordered_json to_json(const ModelSpec& m);
nlohmann::ordered_json to_json(const GpuSpec& g);
nlohmann::ordered_json to_json(const ClusterSpec& c);
nlohmann::ordered_json to_json(const TrainingSpec& t);
nlohmann::ordered_json to_json(const PlanSpec& p);

/// A JSON value as an error message shows it: scalars as written (long ones cut), lists and objects
/// by kind only, so that a huge or deeply nested value neither floods the message nor recurses.
std::string brief(const nlohmann::json& v);

}  // namespace foresight
