#include "core/config_paths.hpp"

#include "foresight/config.hpp"

namespace foresight {
std::string default_scenarios_dir() { return config::kScenariosDir; }
}  // namespace foresight
