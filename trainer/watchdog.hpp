// A progress watchdog: when one rank of a job dies or freezes, the others block forever inside a
// collective or a pipeline receive (MPI and NCCL have no timeout of their own). Each rank runs a
// Watchdog; the training loop beats it once per step, and a rank that has not beaten it for
// `timeout_s` says so on stderr and exits with kExitNoProgress. The launcher (mpirun, srun) then
// tears the rest of the job down, the frozen rank included. The same idea as PyTorch's NCCL
// watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING with a process-group timeout), at step granularity.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace foresight::trainer {

/// Exit code of a rank whose watchdog fired (0 ok, 2 bad input, 3 non-finite loss).
inline constexpr int kExitNoProgress = 4;

class Watchdog {
 public:
  /// timeout_s <= 0 disables the watchdog (no thread is started).
  Watchdog(double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Progress: `step` has finished on this rank.
  void beat(long step);

 private:
  void watch();

  using Clock = std::chrono::steady_clock;
  const double timeout_s_;
  const int rank_;
  std::atomic<Clock::rep> last_beat_;
  std::atomic<long> last_step_{0};
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace foresight::trainer
