// cuBLAS and cuBLASLt load on first use (kernels/cublas_loader.cpp): no GPU needed, only the CUDA
// toolkit the build found. Built only with CUDA (not a *_test.cpp: the glob beside it builds every
// one of those without CUDA too).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "kernels/cublas_loader.hpp"

namespace {

using foresight::kernels::cublas_available;
using foresight::kernels::cublaslt_mapped;

// Everything the dynamic loader reports loading while `command` runs (LD_DEBUG=libs, glibc).
std::string loader_log(const std::string& command) {
  std::string out;
  FILE* p = popen(("LD_DEBUG=libs " + command + " 2>&1 >/dev/null").c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  return out;
}

}  // namespace

TEST(CublasLoader, CublasLtIsMappedOnlyOnItsFirstCall) {
  EXPECT_FALSE(cublaslt_mapped()) << "libcublasLt is mapped before any cuBLAS call: something links it again";
  // The status's name, as the cuBLAS documentation spells the enumerator, comes from the library.
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_TRUE(cublaslt_mapped());
}

TEST(CublasLoader, EveryForwardedFunctionIsExportedByTheLibraries) {
  std::string why;
  EXPECT_TRUE(cublas_available(&why)) << why;
}

TEST(CublasLoader, DescriptorsGoThroughToTheLibraryWithoutAGpu) {
  // A cuBLASLt layout is a host-side object: created, given a batch count, read back, destroyed.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
  const int batch = 3;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
            CUBLAS_STATUS_SUCCESS);
  int read = 0;
  size_t written = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &read, sizeof(read), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(read, batch);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
}

// The binaries run most often (every CLI test, every trainer rank) start without cuBLAS.
TEST(CublasLoader, ForesightAndTheTrainerStartWithoutLoadingCublas) {
  for (const std::string exe : {FORESIGHT_EXE, FORESIGHT_TRAIN_EXE}) {
    const std::string log = loader_log(exe + " --help");
    EXPECT_NE(log.find("calling init"), std::string::npos) << exe << ": no loader log (LD_DEBUG unsupported?)";
    EXPECT_EQ(log.find("libcublas"), std::string::npos) << exe << " --help loads cuBLAS:\n" << log.substr(0, 2000);
  }
}
