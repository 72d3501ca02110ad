// Paths fixed at build time (from the generated config header), behind a function so that only
// one translation unit depends on the generated file.
#pragma once
#include <string>

namespace foresight {
std::string default_scenarios_dir();
}
