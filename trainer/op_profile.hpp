// FORESIGHT_PROFILE_OPS=1: the time each backend op takes, per op name, printed when the backend
// is destroyed. The CUDA backend times its ops with events on its stream (GPU time); the CPU
// backend, whose ops run synchronously on the calling thread, with the host's steady clock. Both
// print the same table, so that a step's time can be split into ops on either backend and set
// beside what the cost model priced each op at (cost_models/host_compute.cpp names the same ops).
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace foresight::trainer {

/// True when the environment asks for op profiles (FORESIGHT_PROFILE_OPS set, not empty, not "0").
bool op_profiling_requested();

/// Per op, the calls' times in milliseconds, in call order.
using OpTimesMs = std::map<std::string, std::vector<double>, std::less<>>;

/// One op's line of the table.
struct OpProfileRow {
  std::string name;
  std::size_t calls = 0;
  double median_ms = 0;  // of one call
  double steady_ms = 0;  // calls x median: one-time costs (first calls' set-up) left out
  double sum_ms = 0;     // every call's time
};

/// The rows, largest calls x median first (ties by name).
std::vector<OpProfileRow> op_profile_rows(const OpTimesMs& times);

/// Prints the table: a header naming `clock` ("GPU" or "CPU") with both totals, then one line per
/// op with calls x median, calls, median, sum and share of the calls x median total.
void print_op_profile(std::FILE* out, const char* clock, const OpTimesMs& times);

/// Host-clock profile of a backend whose ops run synchronously (the CPU backend).
class HostOpProfiler {
 public:
  using Clock = std::chrono::steady_clock;
  void add(std::string_view op, Clock::duration d) {
    auto it = times_.find(op);
    if (it == times_.end()) it = times_.emplace(std::string(op), std::vector<double>{}).first;
    it->second.push_back(std::chrono::duration<double, std::milli>(d).count());
  }
  const OpTimesMs& times() const { return times_; }

 private:
  OpTimesMs times_;
};

/// Times one op from construction to destruction into `p` (nothing when p is null).
class HostOpTimer {
 public:
  HostOpTimer(HostOpProfiler* p, std::string_view op) : p_(p), op_(op) {
    if (p_) start_ = HostOpProfiler::Clock::now();
  }
  HostOpTimer(const HostOpTimer&) = delete;
  HostOpTimer& operator=(const HostOpTimer&) = delete;
  ~HostOpTimer() {
    if (p_) p_->add(op_, HostOpProfiler::Clock::now() - start_);
  }

 private:
  HostOpProfiler* p_;
  std::string_view op_;
  HostOpProfiler::Clock::time_point start_{};
};

}  // namespace foresight::trainer
