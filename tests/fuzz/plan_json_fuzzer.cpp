// libFuzzer entry point for plan json input (tests/fuzz/fuzz_inputs.hpp holds the body).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_inputs.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("FORESIGHT_SCENARIOS", FORESIGHT_SOURCE_DIR "/scenarios", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  foresight::fuzz::plan_json(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
