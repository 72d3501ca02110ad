// A tensor's elements copied to the host (through the backend, which widens bf16), for the
// trainer's unit tests.
#pragma once

#include <vector>

#include "trainer/backend.hpp"

namespace foresight::trainer::test {

inline std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(std::size_t(t.numel()));
  be.copy_to_host(v, t);
  return v;
}

}  // namespace foresight::trainer::test
