#include "apps/cli/progress.hpp"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"

namespace foresight::cli {

ProgressMode progress_mode(bool stderr_is_terminal) {
  if (const char* env = std::getenv("FORESIGHT_PROGRESS")) {
    const std::string_view v(env);
    if (v == "bar") return ProgressMode::bar;
    if (v == "lines") return ProgressMode::lines;
    if (v == "off") return ProgressMode::off;
    throw SpecError(SourceLocation{"<environment>", 0, 0}, "FORESIGHT_PROGRESS", std::string(v),
                    "must be bar, lines or off");
  }
  return stderr_is_terminal ? ProgressMode::bar : ProgressMode::lines;
}

namespace {
std::string duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%d min %02d s", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%d h %02d min", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}
}  // namespace

Progress::Progress(std::ostream& err, ProgressMode mode, std::string stage, long total, std::string unit)
    : err_(err), mode_(mode), stage_(std::move(stage)), unit_(std::move(unit)), total_(total),
      start_(std::chrono::steady_clock::now()), last_(start_) {
  if (mode_ == ProgressMode::lines)
    err_ << stage_ << ": " << (total_ > 0 ? std::to_string(total_) + " " + unit_ : std::string("started")) << "\n"
         << std::flush;
}

Progress::~Progress() { finish(); }

void Progress::update(long done, long total) {
  std::lock_guard<std::mutex> lock(mu_);
  if (total > 0) total_ = total;
  if (mode_ != ProgressMode::bar) return;
  const auto now = std::chrono::steady_clock::now();
  if (finished_ || (now - last_ < std::chrono::milliseconds(100) && done < total_)) return;
  last_ = now;
  draw(done, false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || mode_ == ProgressMode::off) {
    finished_ = true;
    return;
  }
  finished_ = true;
  draw(total_, true);
}

void Progress::draw(long done, bool final) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  char rate_text[64];
  std::snprintf(rate_text, sizeof rate_text, rate < 10 ? "%.2g %s/s" : "%.0f %s/s", rate, unit_.c_str());
  if (mode_ == ProgressMode::lines) {
    err_ << stage_ << ": done, " << done << " " << unit_ << " in " << duration(elapsed) << " (" << rate_text << ")\n"
         << std::flush;
    return;
  }
  const int width = 30;
  const double frac = total_ > 0 ? std::min(1.0, double(done) / total_) : 0.0;
  const int filled = int(width * frac);
  std::string line = "\r" + stage_ + " [" + std::string(filled, '#') + std::string(width - filled, ' ') + "] " +
                     std::to_string(done) + "/" + std::to_string(total_) + " " + unit_ + ", " + rate_text;
  if (final) line += ", " + duration(elapsed);
  else if (rate > 0 && total_ > done) line += ", " + duration((total_ - done) / rate) + " left";
  err_ << line << "\x1b[K" << (final ? "\n" : "") << std::flush;
}

}  // namespace foresight::cli
