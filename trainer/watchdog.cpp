#include "trainer/watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace foresight::trainer {

Watchdog::Watchdog(double timeout_s, int rank)
    : timeout_s_(timeout_s), rank_(rank), last_beat_(Clock::now().time_since_epoch().count()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void Watchdog::beat(long step) {
  last_step_.store(step, std::memory_order_relaxed);
  last_beat_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
}

void Watchdog::watch() {
  // Poll often enough that the exit comes at most 10% (or 1 s) after the deadline.
  const auto poll = std::chrono::duration<double>(std::min(1.0, std::max(0.01, timeout_s_ / 10.0)));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_cv_.wait_for(lock, poll, [this] { return stopping_; })) {
    const Clock::time_point last{Clock::duration{last_beat_.load(std::memory_order_acquire)}};
    const double idle_s = std::chrono::duration<double>(Clock::now() - last).count();
    if (idle_s < timeout_s_) continue;
    const long step = last_step_.load(std::memory_order_relaxed);
    std::fprintf(stderr,
                 "foresight-train: rank %d: no progress for %.1f s (--timeout-s %g) after step %ld: a peer rank has "
                 "most likely died or hung; exiting with code %d so that the launcher ends the job\n",
                 rank_, idle_s, timeout_s_, step, kExitNoProgress);
    std::fflush(stderr);
    // No MPI call from this thread (MPI was initialised single-threaded), no destructors: the
    // main thread is blocked inside MPI and must not be unwound under it.
    std::_Exit(kExitNoProgress);
  }
}

}  // namespace foresight::trainer
