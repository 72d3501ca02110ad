// Chrome/Perfetto trace of a simulated iteration: one process per pipeline stage (a TP group of
// GPUs, simulated as one actor), one thread per stream (compute, data-parallel communication,
// offload copies, the links to neighbouring stages). Times in microseconds, as the format wants.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/analytic_engine.hpp"

namespace foresight::sim {

nlohmann::json chrome_trace(const Workload& w, const SimResult& r);

}  // namespace foresight::sim
