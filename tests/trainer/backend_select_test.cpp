// make_backend(): the names a build offers, and the errors (SpecError naming --backend, which the
// CLI turns into exit code 2) for a name it lacks or a GPU backend on a machine without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "foresight/config.hpp"
#include "trainer/backend.hpp"
#if FORESIGHT_HAVE_CUDA
#include "kernels/device.hpp"
#endif

namespace foresight::trainer {
namespace {

std::string error_of(const std::string& name, Precision precision = Precision::fp32) {
  try {
    make_backend(name, precision);
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "--backend");
    EXPECT_EQ(e.value(), name);
    return e.rule();
  }
  return "";
}

TEST(BackendSelect, CpuAlwaysAndUnknownNamesRefused) {
  auto cpu = make_backend("cpu");
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->compute_dtype(), "fp32");
  EXPECT_EQ(cpu->device(), Device::host);
  const std::string rule = error_of("tpu");
  EXPECT_EQ(rule.rfind("must be cpu", 0), 0u) << rule;
}

TEST(BackendSelect, CudaNeedsACudaBuildAndAGpu) {
#if FORESIGHT_HAVE_CUDA
  if (kernels::device_count().count == 0) {
    const std::string rule = error_of("cuda");
    EXPECT_NE(rule.find("needs a visible CUDA GPU"), std::string::npos) << rule;
    EXPECT_NE(error_of("cuda-tf32").find("needs a visible CUDA GPU"), std::string::npos);
  } else {
    auto gpu = make_backend("cuda-tf32");
    EXPECT_EQ(gpu->name(), "cuda-tf32");
    EXPECT_EQ(gpu->compute_dtype(), "tf32");
    EXPECT_EQ(gpu->device(), Device::cuda);
  }
#else
  const std::string rule = error_of("cuda");
  EXPECT_NE(rule.find("no CUDA toolkit"), std::string::npos) << rule;
#endif
}

// bf16 is a recipe every backend runs: the cpu one says so, and a cuda backend is refused only for
// want of a GPU (the error names --backend, not --precision).
TEST(BackendSelect, Bf16OnEveryBackend) {
  auto cpu = make_backend("cpu", Precision::bf16);
  EXPECT_EQ(cpu->compute_dtype(), "bf16");
  EXPECT_EQ(cpu->precision(), Precision::bf16);
#if FORESIGHT_HAVE_CUDA
  if (kernels::device_count().count == 0) {
    for (const char* name : {"cuda", "cuda-tf32"}) {
      const std::string rule = error_of(name, Precision::bf16);
      EXPECT_NE(rule.find("needs a visible CUDA GPU"), std::string::npos) << name << ": " << rule;
    }
  } else {
    for (const char* name : {"cuda", "cuda-tf32"}) {
      auto gpu = make_backend(name, Precision::bf16);
      EXPECT_EQ(gpu->compute_dtype(), "bf16") << name;
      EXPECT_EQ(gpu->precision(), Precision::bf16) << name;
      EXPECT_EQ(gpu->zeros(3, 4).storage(), Storage::packed_bf16) << name;
      EXPECT_EQ(gpu->zeros_fp32(3, 4).storage(), Storage::float32) << name;
    }
  }
#endif
}

}  // namespace
}  // namespace foresight::trainer
