// Progress of long work on stderr, never on stdout (so --json output stays machine-readable):
// under a terminal a bar redrawn in place with the count, the rate and the time left; otherwise
// one line when a stage starts and one when it ends. FORESIGHT_PROGRESS=bar|lines|off forces a
// mode (tests drive the bar through it); --json commands choose lines, so a pipe reads cleanly.
#pragma once

#include <chrono>
#include <mutex>
#include <ostream>
#include <string>

namespace foresight::cli {

enum class ProgressMode { bar, lines, off };

/// The mode for `err`: FORESIGHT_PROGRESS when set, else a bar on a terminal and lines elsewhere.
ProgressMode progress_mode(bool stderr_is_terminal);

class Progress {
 public:
  /// A stage of `total` units ("evaluating plans", 62,000 plans); total 0 when unknown.
  Progress(std::ostream& err, ProgressMode mode, std::string stage, long total, std::string unit);
  ~Progress();
  /// `done` units finished (of `total`, when the stage learns it only now); safe from several
  /// threads, redraws at most ten times a second.
  void update(long done, long total = 0);
  /// The stage ended: the final count, the rate and the time it took.
  void finish();

 private:
  void draw(long done, bool final);
  std::ostream& err_;
  ProgressMode mode_;
  std::string stage_, unit_;
  long total_;
  std::chrono::steady_clock::time_point start_, last_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace foresight::cli
