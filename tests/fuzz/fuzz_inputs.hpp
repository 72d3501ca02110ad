// The bodies of the fuzz targets, one per input format, shared by the libFuzzer entry points
// (*_fuzzer.cpp, clang only) and by the regression test that replays every input that once failed
// (fuzz_regressions_test.cpp, every build). Each returns normally when the input is accepted or
// refused through SpecError; anything else escaping is a finding.
#pragma once

#include <string>

namespace foresight::fuzz {

/// A scenario file (experiment, model, cluster or GPU) held in memory. Relative and bare-name
/// references resolve as if it lay in tests/data/good/, so they reach the test fixtures and the
/// bundled library.
void scenario_yaml(const std::string& text);

/// plan.json as the trainer reads it.
void plan_json(const std::string& text);

/// A calibration profile, and a GEMM estimate from it when it holds GEMMs.
void profile_json(const std::string& text);

}  // namespace foresight::fuzz
