// The one measurement harness (STYLE.md item 11) for kernels and copies: warm-up, L2 flushed before
// every timed repetition (a memset over a buffer twice the L2 size, so each repetition starts cold
// as it would inside a training step), CUDA events around the measured call only, and
// repetitions until a GPU-time budget (within min/max counts), summarised by median and spread.
// NCCL collectives use their own multi-device loop (nccl_sweep.cpp) with the same statistics.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "calibrate/stats.hpp"

namespace foresight::calibrate {

struct HarnessOptions {
  int warmup = 3;
  int min_reps = 5;
  int max_reps = 50;
  double budget_s = 0.2;  // GPU time of the timed repetitions, roughly
  bool flush_l2 = true;
};

/// Fills a device buffer with random values in [-1, 1) (bf16 or float): timing on zeros or a constant
/// flatters the tensor cores' power draw and hides unwritten outputs. A 4 MiB random block is
/// generated once per call and copied across the buffer; each call of the process takes the next
/// seed, so two buffers never hold the same values and a rerun fills them alike.
void fill_random_bf16(void* device_ptr, std::size_t bytes);
void fill_random_f32(void* device_ptr, std::size_t bytes);

class Harness {
 public:
  /// On the current device; allocates the flush buffer (2 x L2).
  explicit Harness(HarnessOptions options = {});
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  /// Times `launch(stream)`, which must enqueue its work on the given stream only.
  Summary time(const std::function<void(cudaStream_t)>& launch);
  cudaStream_t stream() const { return stream_; }

 private:
  HarnessOptions o_;
  cudaStream_t stream_ = nullptr;
  void* flush_ = nullptr;
  std::size_t flush_bytes_ = 0;
  std::vector<cudaEvent_t> start_, stop_;
};

}  // namespace foresight::calibrate
