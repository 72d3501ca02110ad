#include "calibrate/harness.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/cuda_check.hpp"

namespace foresight::calibrate {

namespace {
unsigned next_fill_seed() {
  static unsigned seed = 42;
  return seed++;
}

template <class T, class Convert>
void fill_random(void* p, std::size_t bytes, Convert convert) {
  const std::size_t block = std::min<std::size_t>(bytes, std::size_t(4) << 20) / sizeof(T) * sizeof(T);
  if (block == 0) {  // fewer bytes than one element: nothing random fits, but leave nothing unset
    if (bytes > 0) FORESIGHT_CUDA(cudaMemset(p, 0, bytes));
    return;
  }
  std::vector<T> h(block / sizeof(T));
  std::mt19937 rng(next_fill_seed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : h) x = convert(u(rng));
  for (std::size_t off = 0; off < bytes; off += block)
    FORESIGHT_CUDA(cudaMemcpy(static_cast<char*>(p) + off, h.data(), std::min(block, bytes - off), cudaMemcpyHostToDevice));
}
}  // namespace

void fill_random_bf16(void* p, std::size_t bytes) {
  fill_random<kernels::bf16>(p, bytes, [](float f) { return kernels::to_bf16(f); });
}
void fill_random_f32(void* p, std::size_t bytes) {
  fill_random<float>(p, bytes, [](float f) { return f; });
}

Harness::Harness(HarnessOptions options) : o_(options) {
  int dev = 0, l2 = 0;
  FORESIGHT_CUDA(cudaGetDevice(&dev));
  FORESIGHT_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  FORESIGHT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  flush_bytes_ = std::max<std::size_t>(2 * std::size_t(l2), std::size_t(8) << 20);
  if (o_.flush_l2) FORESIGHT_CUDA(cudaMalloc(&flush_, flush_bytes_));
  start_.resize(o_.max_reps);
  stop_.resize(o_.max_reps);
  for (int i = 0; i < o_.max_reps; ++i) {
    FORESIGHT_CUDA(cudaEventCreate(&start_[i]));
    FORESIGHT_CUDA(cudaEventCreate(&stop_[i]));
  }
}

Harness::~Harness() {
  for (auto e : start_) cudaEventDestroy(e);
  for (auto e : stop_) cudaEventDestroy(e);
  if (flush_) cudaFree(flush_);
  if (stream_) cudaStreamDestroy(stream_);
}

Summary Harness::time(const std::function<void(cudaStream_t)>& launch) {
  for (int i = 0; i < o_.warmup; ++i) launch(stream_);
  // One timed run sizes the repetition count to the budget.
  if (flush_) FORESIGHT_CUDA(cudaMemsetAsync(flush_, 0, flush_bytes_, stream_));
  FORESIGHT_CUDA(cudaEventRecord(start_[0], stream_));
  launch(stream_);
  FORESIGHT_CUDA(cudaEventRecord(stop_[0], stream_));
  FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
  float ms = 0;
  FORESIGHT_CUDA(cudaEventElapsedTime(&ms, start_[0], stop_[0]));
  const int reps = std::clamp(int(o_.budget_s / std::max(ms * 1e-3, 1e-7)), o_.min_reps, o_.max_reps);
  for (int r = 0; r < reps; ++r) {
    if (flush_) FORESIGHT_CUDA(cudaMemsetAsync(flush_, r & 0xff, flush_bytes_, stream_));
    FORESIGHT_CUDA(cudaEventRecord(start_[r], stream_));
    launch(stream_);
    FORESIGHT_CUDA(cudaEventRecord(stop_[r], stream_));
  }
  FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
  std::vector<double> t(reps);
  for (int r = 0; r < reps; ++r) {
    FORESIGHT_CUDA(cudaEventElapsedTime(&ms, start_[r], stop_[r]));
    t[r] = ms * 1e-3;
  }
  return summarize(t);
}

}  // namespace foresight::calibrate
