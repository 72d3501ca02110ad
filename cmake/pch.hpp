// The headers precompiled for sim/, planner/, apps/ and the GoogleTest suites
// (cmake/PrecompiledHeaders.cmake): the standard library, nlohmann::json, Boost.Graph and the
// project's headers that nearly every translation unit there reaches through sim/costing.hpp.
// Parsing them took 5-10 s of each such unit's 6-20 s compile on CI's two cores; a unit whose own
// code needs one of them includes it as before, so a build without the precompiled header
// (-DFORESIGHT_PCH=OFF) compiles the same code.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report.hpp"
#include "core/scenario.hpp"
#include "planner/search.hpp"
#include "sim/costing.hpp"
