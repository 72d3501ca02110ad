// FORESIGHT_PROFILE_OPS: the per-op table (trainer/op_profile.hpp) against hand arithmetic, and the
// CPU backend's host-clock profile naming each call as the host profile does (matmul by transpose
// variant), printed only when asked for.
#include "trainer/op_profile.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cstdlib>
#include <string>

#include "trainer/cpu_backend.hpp"

namespace foresight::trainer {
namespace {

TEST(OpProfile, RowsAreCallsTimesTheMedianLargestFirst) {
  // a: 1, 3, 2 ms -> median 2, 3 calls: 6 (sum 6). b: 5, 1 -> the upper median of two, 5, x 2 =
  // 10 (sum 6). c: no calls, no row.
  const OpTimesMs times = {{"a", {1, 3, 2}}, {"b", {5, 1}}, {"c", {}}};
  const std::vector<OpProfileRow> rows = op_profile_rows(times);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "b");
  EXPECT_EQ(rows[0].calls, 2u);
  EXPECT_DOUBLE_EQ(rows[0].median_ms, 5);
  EXPECT_DOUBLE_EQ(rows[0].steady_ms, 10);
  EXPECT_DOUBLE_EQ(rows[0].sum_ms, 6);
  EXPECT_EQ(rows[1].name, "a");
  EXPECT_DOUBLE_EQ(rows[1].median_ms, 2);
  EXPECT_DOUBLE_EQ(rows[1].steady_ms, 6);
  EXPECT_DOUBLE_EQ(rows[1].sum_ms, 6);
}

TEST(OpProfile, TablePrintsBothTotalsAndEachShare) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  print_op_profile(f, "CPU", {{"a", {1, 3, 2}}, {"b", {5, 1}}});
  std::rewind(f);
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) text += buf;
  std::fclose(f);
  // 10 + 6 = 16 ms as calls x median, 6 + 6 = 12 ms summed; b's share 10 / 16, a's 6 / 16.
  EXPECT_NE(text.find("CPU time per op (FORESIGHT_PROFILE_OPS), all steps: 16.0 ms as calls x median, 12.0 ms summed"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" 62.5%  b"), std::string::npos) << text;
  EXPECT_NE(text.find(" 37.5%  a"), std::string::npos) << text;
  EXPECT_LT(text.find("  b\n"), text.find("  a\n")) << text;
}

/// The rows of the table a CPU backend prints when it goes, with FORESIGHT_PROFILE_OPS as given.
std::string cpu_backend_profile(const char* env) {
  if (env)
    setenv("FORESIGHT_PROFILE_OPS", env, 1);
  else
    unsetenv("FORESIGHT_PROFILE_OPS");
  testing::internal::CaptureStderr();
  {
    auto be = make_cpu_backend();
    Tensor a = be->zeros(4, 3), b = be->zeros(3, 5), c = be->zeros(4, 5), bt = be->zeros(5, 3), w = be->zeros(3, 5);
    be->matmul(c, a, false, b, false, false);   // nn
    be->matmul(c, a, false, b, false, false);   // nn
    be->matmul(c, a, false, bt, true, false);   // nt: c (4,5) = a (4,3) bt^T
    be->matmul(w, a, true, c, false, true);     // tn: w (3,5) += a^T c
    be->add(c, c);
  }
  unsetenv("FORESIGHT_PROFILE_OPS");
  return testing::internal::GetCapturedStderr();
}

/// The `calls` column of op's row, or -1 when the table has no such row.
int calls_of(const std::string& table, const std::string& op) {
  const std::size_t at = table.find("  " + op + "\n");
  if (at == std::string::npos) return -1;
  const std::size_t line = table.rfind('\n', at) + 1;
  double steady = 0;
  int calls = -1;
  std::sscanf(table.c_str() + line, "%lf %d", &steady, &calls);
  return calls;
}

TEST(OpProfile, CpuBackendNamesEachCallAsTheHostProfileDoes) {
  const std::string table = cpu_backend_profile("1");
  EXPECT_NE(table.find("CPU time per op"), std::string::npos) << table;
  EXPECT_EQ(calls_of(table, "matmul_nn"), 2) << table;
  EXPECT_EQ(calls_of(table, "matmul_nt"), 1) << table;
  EXPECT_EQ(calls_of(table, "matmul_tn"), 1) << table;
  EXPECT_EQ(calls_of(table, "add"), 1) << table;
  EXPECT_EQ(calls_of(table, "zeros"), 5) << table;
  EXPECT_EQ(calls_of(table, "copy"), -1) << table;
}

TEST(OpProfile, NothingIsPrintedUnlessAskedFor) {
  EXPECT_EQ(cpu_backend_profile(nullptr), "");
  EXPECT_EQ(cpu_backend_profile("0"), "");
  EXPECT_EQ(cpu_backend_profile(""), "");
}

// The CPU backend's functions start on 64-byte boundaries (trainer/CMakeLists.txt), so that its hot
// loops sit at the same offsets in the foresight binary that calibrates them and in foresight-train
// that runs them. Four of its public functions: each would be 64-byte aligned by chance one time in
// four at the compiler's default 16-byte alignment. (GCC aligns the functions it optimises for
// speed; the .cold parts it splits off are not aligned, nor need they be.)
TEST(CpuBackendCode, PublicFunctionsStartOnA64ByteBoundary) {
  using Make = std::unique_ptr<Backend> (*)(Precision);
  const std::uintptr_t starts[] = {reinterpret_cast<std::uintptr_t>(static_cast<Make>(&make_cpu_backend)),
                                   reinterpret_cast<std::uintptr_t>(static_cast<Make>(&make_cpu_staged_backend)),
                                   reinterpret_cast<std::uintptr_t>(&op_profiling_requested),
                                   reinterpret_cast<std::uintptr_t>(&print_op_profile)};
  for (const std::uintptr_t a : starts) EXPECT_EQ(a % 64, 0u) << std::hex << a;
}

// The CPU backend keeps freed host memory for the next tensor (trainer/cpu_backend.cpp,
// keep_freed_host_memory): an 8 MiB tensor comes from the heap rather than a fresh mapping (glibc's
// default above 128 KiB), and the heap keeps its pages once the tensor is gone. (AddressSanitizer
// brings its own allocator, which mallinfo2 does not describe.)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FORESIGHT_TEST_UNDER_ASAN 1
#endif
#endif
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(FORESIGHT_TEST_UNDER_ASAN)
TEST(CpuBackendMemory, FreedTensorsStayWithTheProcess) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const std::size_t mapped_before = mallinfo2().hblkhd, bytes = std::size_t(8) << 20;
  {
    const Tensor t = be->zeros(1024, 2048);
    EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "an 8 MiB tensor was given a mapping of its own";
  }
  EXPECT_GE(mallinfo2().fordblks, bytes) << "the heap gave the freed tensor's pages back";
}
#endif

}  // namespace
}  // namespace foresight::trainer
