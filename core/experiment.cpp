#include "core/experiment.hpp"

namespace foresight {

SourceLocation Experiment::location_of(const std::string& field) const {
  // Walk up the dotted path: "plan.offload.activations" -> "plan.offload" -> "plan".
  std::string f = field;
  while (true) {
    if (auto it = locations.find(f); it != locations.end()) return it->second;
    auto dot = f.rfind('.');
    if (dot == std::string::npos) break;
    f.resize(dot);
  }
  return SourceLocation{file, 0, 0};
}

}  // namespace foresight
