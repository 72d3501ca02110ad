// Helpers of the GPU tests: a fixture that skips without a device, device buffers that poison
// their contents (NaN bytes) before each launch, bf16 rounding of host data so the CPU twin sees
// exactly the GPU's inputs, and one comparison that prints max abs / rel error and fails on NaN.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/device.hpp"
#include "kernels/kernels.hpp"

namespace foresight::kernels::gputest {

#define GPU_CHECK(call) ASSERT_EQ((call), cudaSuccess) << #call

/// Relative-error thresholds per output dtype, normwise: max|got - want| / max|want|. bf16 keeps 8
/// significant bits (half-ulp 2^-9 .. 2^-8 relative), so 1e-2 leaves room for fp32 summation order;
/// fp32 outputs of fp32 math get 1e-4.
inline constexpr double kTolBf16 = 1e-2;
inline constexpr double kTolF32 = 1e-4;

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto c = device_count();
    if (c.count == 0) GTEST_SKIP() << c.reason;  // "no CUDA device (...)"
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << cudaGetErrorString(cudaGetLastError()); }
  cudaStream_t stream = nullptr;
};

template <class T>
class DevBuf {
 public:
  explicit DevBuf(std::size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw CudaError("cudaMalloc in test");
  }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) throw CudaError("upload");
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) throw CudaError("download");
    return h;
  }
  /// 0xFF bytes: NaN for bf16 and fp32, -1 for int32 (use byte 0x7F for indices where -1 is valid).
  void poison(unsigned char byte = 0xFF) {
    if (cudaMemset(p_, byte, n_ * sizeof(T)) != cudaSuccess) throw CudaError("poison");
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

inline std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Rounds in place to bf16 values and returns the bf16 copy the GPU gets.
inline std::vector<bf16> to_bf16_inplace(std::vector<float>& v) {
  std::vector<bf16> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    b[i] = to_bf16(v[i]);
    v[i] = to_float(b[i]);
  }
  return b;
}

inline std::vector<float> to_floats(const std::vector<bf16>& b) {
  std::vector<float> f(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) f[i] = to_float(b[i]);
  return f;
}
inline std::vector<float> to_floats(const std::vector<float>& f) { return f; }

/// Prints and checks the normwise relative error; any non-finite value where the reference is
/// finite (a poisoned element never written) fails.
template <class G>
void expect_close(const std::string& what, const std::vector<G>& got_raw, const std::vector<float>& want, double tol) {
  const std::vector<float> got = to_floats(got_raw);
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, scale = 1e-30;
  long bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
      ++bad;
      continue;
    }
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  std::printf("  %-40s max abs %.3e  rel %.3e  (tol %.0e)\n", what.c_str(), err, err / scale, tol);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " non-finite outputs (unwritten poison?)";
  EXPECT_LE(err / scale, tol) << what;
}

}  // namespace foresight::kernels::gputest
