// `foresight validate --local`: the closed loop on this machine (planner/closed_loop.hpp). Calibrate
// the trainer's CPU backend (or reuse a fresh profile of this host and these kernels), predict every
// plan and write its plan.json with the prediction, then run foresight-train on each (mpirun for more
// than one rank) and compare. Predictions are complete before the first run starts.
#include "apps/cli/local_loop.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apps/cli/cli.hpp"
#include "core/error.hpp"
#include "cost_models/host_profile.hpp"
#include "foresight/git_sha.hpp"
#include "planner/closed_loop.hpp"

namespace foresight::cli {

namespace fs = std::filesystem;

namespace {

fs::path self_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("foresight") : p;
}

/// foresight-train: $FORESIGHT_TRAIN, else beside this binary (an install), else the build tree's
/// trainer/ folder next to apps/.
fs::path trainer_path() {
  if (const char* env = std::getenv("FORESIGHT_TRAIN"); env && *env) return env;
  const fs::path dir = self_path().parent_path();
  for (const fs::path& p : {dir / "foresight-train", dir.parent_path() / "trainer" / "foresight-train"})
    if (fs::exists(p)) return p;
  throw SpecError(SourceLocation{"<command line>", 0, 0}, "--local", "",
                  "needs the bundled trainer foresight-train beside " + dir.string() +
                      " or in ../trainer (or FORESIGHT_TRAIN=path)");
}

/// Runs argv with stdout and stderr into `log`; kills it after `timeout_s`. Returns the exit
/// status (128 + signal when killed, 127 when it could not start).
int run_logged(const std::vector<std::string>& argv, const fs::path& log, int timeout_s) {
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so a timeout ends mpirun and its ranks together
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    if (::getuid() == 0) {  // OpenMPI refuses root unless told
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::perror(args[0]);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return 127;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 128 + SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 127;
}

std::string tail_of(const fs::path& log, std::size_t chars = 400) {
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  return s.size() > chars ? s.substr(s.size() - chars) : s;
}

/// A profile of this host and these kernels, written less than a day ago.
bool fresh_profile(const fs::path& path, std::string& why) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    why = "no profile yet";
    return false;
  }
  try {
    const cost_models::HostProfile p = cost_models::load_host_profile(path.string());
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    if (p.hostname != host) {
      why = "profile of another host (" + p.hostname + ")";
      return false;
    }
    if (p.kernels.find(config::kGitSha) == std::string::npos) {
      why = "profile of other kernels (" + p.kernels + ")";
      return false;
    }
    if (std::time(nullptr) - p.created_unix > 24 * 3600) {
      why = "profile older than a day";
      return false;
    }
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  return true;
}

/// The mpirun line of the profile (the one calibration measured MPI with), for `ranks` ranks.
std::vector<std::string> mpirun_for(const cost_models::HostProfile& p, int ranks) {
  std::vector<std::string> line = p.mpirun;
  if (line.empty()) line = {"mpirun", "-np", "{ranks}", "--oversubscribe", "--bind-to", "none"};
  for (std::string& a : line)
    if (a == "{ranks}") a = std::to_string(ranks);
  return line;
}

}  // namespace

int run_local_loop(const LocalLoopOptions& o, std::ostream& out, std::ostream& err) {
  if (o.backend != "cpu")
    throw SpecError(SourceLocation{"<command line>", 0, 0}, "--backend", o.backend,
                    "must be cpu for now: the CUDA closed loop needs a CUDA profile of the trainer's kernels "
                    "(issue 24 item 3) and a GPU");
  if (o.steps < 3)
    throw SpecError(SourceLocation{"<command line>", 0, 0}, "--steps", std::to_string(o.steps),
                    "must be at least 3 (the first step is warm-up; the median needs two more)");
  const fs::path dir = o.work_dir;
  fs::create_directories(dir);
  const fs::path profile = o.profile.empty() ? dir / "cpu-profile.json" : fs::path(o.profile);

  // 1. Calibrate, unless a fresh profile of this host and these kernels is at hand.
  std::string why;
  if (!o.profile.empty() && !fs::exists(profile))
    throw SpecError(SourceLocation{o.profile, 0, 0}, "--profile", o.profile, "does not exist");
  if (o.profile.empty() && !fresh_profile(profile, why)) {
    err << "validate --local: calibrating the CPU backend (" << why << ") ...\n";
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = run_logged({self_path().string(), "calibrate", "--backend", "cpu", "--out", profile.string()},
                              dir / "calibrate.log", 600);
    if (rc != 0)
      throw SpecError(SourceLocation{(dir / "calibrate.log").string(), 0, 0}, "calibrate", std::to_string(rc),
                      "`foresight calibrate --backend cpu` failed: " + tail_of(dir / "calibrate.log"));
    err << "validate --local: calibrated in "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s -> " << profile.string()
        << "\n";
  }
  const auto host = cost_models::cached_host_profile(profile.string());
  const int max_ranks = o.max_ranks > 0 ? o.max_ranks : std::max(2, host->cores);

  // 2. Predict every plan and write its plan.json, before anything runs.
  std::vector<planner::LoopCase> cases = planner::closed_loop_plans(max_ranks, o.steps);
  std::vector<sim::Prediction> predicted;
  for (planner::LoopCase& c : cases) {
    predicted.push_back(planner::predict_local(c, profile.string()));
    fs::create_directories(dir / c.name);
    c.plan.checkpoint_dir = (dir / c.name / "checkpoints").string();
    write_file_atomically(dir / c.name / "plan.json", to_json(c.plan).dump(2) + "\n", "--local");
  }

  // 3. Run them.
  const fs::path train = trainer_path();
  std::vector<planner::LoopMeasurement> measured;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const planner::LoopCase& c = cases[i];
    const fs::path run = dir / c.name;
    std::error_code ec;
    fs::remove(run / "summary.json", ec);
    std::vector<std::string> argv;
    if (c.plan.gpus > 1) argv = mpirun_for(*host, c.plan.gpus);
    for (const std::string& a : {train.string(), std::string("--plan"), (run / "plan.json").string(),
                                 std::string("--summary"), (run / "summary.json").string(), std::string("--backend"),
                                 o.backend, std::string("--quiet"), std::string("--timeout-s"), std::string("120")})
      argv.push_back(a);
    err << "validate --local: [" << i + 1 << "/" << cases.size() << "] " << c.name << " on " << c.plan.gpus
        << " rank(s) ...\n";
    const int rc = run_logged(argv, run / "train.log", 300);
    planner::LoopMeasurement m;
    std::ifstream f(run / "summary.json");
    if (rc == 0 && f) {
      try {
        m = planner::measurement_from_summary(nlohmann::json::parse(f));
      } catch (const std::exception& e) {
        m.error = std::string("unreadable summary: ") + e.what();
      }
    } else {
      m.error = "foresight-train exited " + std::to_string(rc) + ": " + tail_of(run / "train.log", 300);
    }
    measured.push_back(m);
  }

  // 4. Compare.
  const nlohmann::ordered_json report = planner::closed_loop_json(cases, predicted, measured, o.backend, profile.string());
  if (!o.results.empty()) write_file_atomically(o.results, report.dump(2) + "\n", "--results");
  const std::string md = planner::closed_loop_markdown(report, o.command);
  if (!o.markdown.empty()) write_file_atomically(o.markdown, md, "--markdown");
  if (o.json)
    out << report.dump(2) << "\n";
  else
    out << md;
  for (const auto& m : measured)
    if (!m.error.empty()) return 1;  // a run failed: the table says which
  return kExitOk;
}

}  // namespace foresight::cli
