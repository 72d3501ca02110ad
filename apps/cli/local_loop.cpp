// `foresight validate --local`: the closed loop on this machine (planner/closed_loop.hpp). Calibrate
// the trainer's CPU backend (or reuse a fresh profile of this host and these kernels), predict every
// plan and write its plan.json with the prediction, then run foresight-train on each (mpirun for more
// than one rank) and compare. Predictions are complete before the first run starts.
#include "apps/cli/local_loop.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "apps/cli/cli.hpp"
#include "calibrate/cpu_bench.hpp"
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

/// A trainer tool (foresight-train, foresight-commbench): $FORESIGHT_TRAIN's folder when set, else
/// beside this binary (an install), else the build tree's trainer/ folder next to apps/.
fs::path tool_path(const std::string& name) {
  if (const char* env = std::getenv("FORESIGHT_TRAIN"); env && *env) {
    const fs::path p = name == "foresight-train" ? fs::path(env) : fs::path(env).parent_path() / name;
    if (fs::exists(p)) return p;
  }
  const fs::path dir = self_path().parent_path();
  for (const fs::path& p : {dir / name, dir.parent_path() / "trainer" / name})
    if (fs::exists(p)) return p;
  throw SpecError(SourceLocation{"<command line>", 0, 0}, "--backend", "cpu",
                  "needs the bundled " + name + " beside " + dir.string() +
                      " or in ../trainer (or FORESIGHT_TRAIN=path/to/foresight-train)");
}
fs::path trainer_path() { return tool_path("foresight-train"); }

/// How foresight-train and foresight-commbench are launched on this host ("{ranks}" is the count):
/// ranks may outnumber cores (the slowdown is measured), and are not pinned, so that a rank
/// waiting in a receive never holds a core another needs.
std::vector<std::string> local_mpirun_template() {
  return {"mpirun", "-np", "{ranks}", "--oversubscribe", "--bind-to", "none"};
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

/// Runs a tool that writes its result as JSON to `result` (foresight-train --time-ops,
/// foresight-commbench --ops), passes the last 4000 characters of its log on to `err`, removes both
/// files and returns the parsed result, null when the tool failed or wrote no JSON; `rc` gets its
/// exit status.
nlohmann::ordered_json run_for_json(const std::vector<std::string>& argv, const fs::path& result,
                                    const fs::path& log, std::ostream& err, int& rc) {
  rc = run_logged(argv, log, 600);
  nlohmann::ordered_json r;
  if (std::ifstream f(result); rc == 0 && f) r = nlohmann::ordered_json::parse(f, nullptr, false);
  err << tail_of(log, 4000);
  std::error_code ec;
  fs::remove(result, ec);
  fs::remove(log, ec);
  return r.is_discarded() ? nlohmann::ordered_json() : r;
}

/// The cores this process may run on (its affinity mask: a container's cpuset, not the whole host).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/// A profile of this host and these kernels, written less than a day ago, with the slowdown of up
/// to `ranks` concurrent ranks measured (the CPU backend; a GPU profile has none).
bool fresh_profile(const fs::path& path, const std::string& backend, int ranks, std::string& why) {
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
    if (p.kernels.find(config::kGitSha) == std::string::npos ||
        p.kernels.find("foresight-train " + backend + " backend") == std::string::npos) {
      why = "profile of other kernels (" + p.kernels + ")";
      return false;
    }
    if (std::time(nullptr) - p.created_unix > 24 * 3600) {
      why = "profile older than a day";
      return false;
    }
    if (p.step_context_fell_back()) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "profile made while the host's speed was unsteady (its step context read %.3fx twice outside the "
                    "plausible range)",
                    *p.step_context_measured);
      why = line;
      return false;
    }
    if (backend == "cpu" && ranks > 1 && (p.slowdown.empty() || p.slowdown.back().first < ranks)) {
      why = "profile without the slowdown of " + std::to_string(ranks) + " concurrent ranks";
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
  if (line.empty()) line = local_mpirun_template();
  for (std::string& a : line)
    if (a == "{ranks}") a = std::to_string(ranks);
  return line;
}

/// Seconds per call of the oversubscription probe on each of `threads` threads run at once (threads
/// rather than ranks: no launch cost), for `duration_s`.
std::vector<double> probe_threads_now(int threads, double duration_s) {
  std::vector<double> t(std::size_t(std::max(1, threads)));
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < t.size(); ++i)
    pool.emplace_back([&t, i, duration_s] { t[i] = calibrate::slowdown_probe_seconds(duration_s); });
  for (auto& th : pool) th.join();
  return t;
}

/// Their mean: how a run's guard reads the host (a spell on one core slows it as it slows a run).
double probe_now(int threads, double duration_s) {
  const std::vector<double> t = probe_threads_now(threads, duration_s);
  double sum = 0;
  for (double x : t) sum += x;
  return sum / double(t.size());
}

/// CPU seconds this process's CPUs (its affinity mask: a container's cpuset, not the whole host)
/// have spent busy so far per /proc/stat's per-CPU lines: user, nice, system and steal (a
/// hypervisor's steal is time another tenant took; interrupt time is left out, since getrusage
/// charges the run none of what it causes); -1 where unreadable. `cores`: how many CPUs were read.
double busy_cpu_s(int& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  std::ifstream f("/proc/stat");
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (!f || hz <= 0) return -1;
  double ticks = 0;
  cores = 0;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream in(line.substr(3));
    int id = -1;
    unsigned long long v[8] = {};
    if (!(in >> id) || id < 0 || id >= CPU_SETSIZE || !CPU_ISSET(id, &set)) continue;
    for (auto& x : v)
      if (!(in >> x)) return -1;
    ticks += double(v[0] + v[1] + v[2] + v[7]);
    ++cores;
  }
  return cores > 0 ? ticks / double(hz) : -1;
}

/// CPU seconds used by this process and by its children reaped so far (mpirun reaps its ranks).
double own_and_children_cpu_s() {
  auto sec = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);
  return sec(self.ru_utime) + sec(self.ru_stime) + sec(kids.ru_utime) + sec(kids.ru_stime);
}

/// Runs `run` and returns the slowdown other processes imply for it as a run of `ranks` ranks
/// (planner::others_load_slowdown): the busy time of this process's CPUs while it ran, less its
/// own and its children's; 1 where /proc/stat cannot be read. A burst inside the run escapes probes
/// taken around it, not this.
double others_slowdown_during(int ranks, const std::function<void()>& run) {
  int cores = 0;
  const double busy0 = busy_cpu_s(cores), own0 = own_and_children_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double busy1 = busy_cpu_s(cores), own1 = own_and_children_cpu_s();
  if (busy0 < 0 || busy1 < 0) return 1.0;
  return planner::others_load_slowdown((busy1 - busy0) - (own1 - own0), wall, cores, ranks);
}

/// The probe's time at calibration for `ranks` ranks at once, 0 when the profile has none: as read
/// in this process around the timing of the ops (the speed the predictions assume), else, in an
/// older profile, as the oversubscription runs read it.
double probe_reference(const cost_models::HostProfile& p, int ranks) {
  for (const auto& [threads, s] : p.ops_probe_s)
    if (threads == ranks) return s;
  for (std::size_t i = 0; i < p.slowdown.size() && i < p.probe_s.size(); ++i)
    if (p.slowdown[i].first == ranks) return p.probe_s[i];
  return 0;
}

}  // namespace

int calibrate_cpu(const std::string& path, bool quick, std::ostream& out, std::ostream& err) {
  return calibrate_trainer_backend(path, "cpu", quick, out, err);
}

namespace {

// One calibration; `attempt` counts those made in a row (see the step context below).
int calibrate_attempt(const std::string& path, const std::string& backend_name, bool quick, std::ostream& out,
                      std::ostream& err, int max_concurrent_ranks, int attempt) {
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::ordered_json j;
  j["format"] = "foresight-cpu-profile/1";
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string cpu;
  {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("model name", 0) == 0) {
        cpu = line.substr(line.find(':') + 2);
        break;
      }
  }
  const int cores = usable_cores();
  j["host"] = {{"hostname", host}, {"cpu_model", cpu}, {"cores", cores}, {"backend", backend_name},
               {"kernels", "foresight-train " + backend_name + " backend @ " + config::kGitSha}};
  j["created_unix"] = (long long)std::time(nullptr);
  const fs::path tmp = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  const std::string tag = std::to_string(::getpid());
  err << "calibrate: the trainer's " << backend_name << " backend on " << host << " (" << cores << " cores)\n";
  if (backend_name == "cpu") {
    // The ops are timed by foresight-train itself (--time-ops): the CPU backend's strided GEMM loops
    // run at a speed that depends on where they land in a binary (session 59: one shape 0.43 ms in
    // this binary, 0.47-0.48 ms in foresight-train, 0.63 ms in a third one, all the same object
    // code), so they are timed in the binary that runs them; there, with one-thread readings of the
    // probe's median call among them (calibrate/cpu_bench.hpp), each stated at the quickest tenth of
    // those in-pass readings. Around that run, this process reads the host probe on 1..min(cores, 2)
    // threads, three rounds before and three after (one thread, then two, in each round); the
    // quickest one-thread reading is the speed `validate --local` checks every one-rank run against,
    // with the same probe in the same binary (its checks read the probe's mean call over 0.15 s; under
    // another process's time-slicing the mean reads slower, and such a run is meant to read as busy).
    // The two-thread reference is that times the median ratio of each round's two-thread reading to
    // its one-thread reading, taken a moment apart: a slow spell during the readings then moves both
    // alike (session 54: the medians of separate before/after readings put the two-thread reference
    // 7% under the one-thread one after a 30% drift, and every two-rank run read as busy). How far the
    // one-thread readings after sit from those before is recorded (ops_probe_drift): a shared
    // machine's speed drifts over seconds to minutes.
    // (1 and 2 threads: the loop's plans have one or two ranks; other counts fall back on the
    // oversubscription runs' readings.)
    // Several threads read as planner::concurrent_probe_reading reads ranks (a spell on one core
    // is the host's, not the threads' contention).
    const int threads = std::clamp(cores, 1, 2);
    const double even = LocalLoopOptions{}.quiet_tolerance;
    int lopsided = 0;  // readings of several threads taken at their quickest one's
    auto probe_all = [&] {
      std::vector<std::vector<double>> r(static_cast<std::size_t>(threads));
      for (int i = 0; i < 3; ++i)
        for (int t = 1; t <= threads; ++t) {
          const planner::ProbeReading reading =
              planner::concurrent_probe_reading(probe_threads_now(t, 0.15), cores, even);
          lopsided += reading.at_quickest;
          r[std::size_t(t - 1)].push_back(reading.seconds);
        }
      return r;
    };
    // A pass whose one-thread readings after sit more than kMostDrift from those before ran across
    // a change of the host's speed, which the in-pass scaling corrects only in part (on the CI VM a
    // calibration 33% apart predicted every one-rank plan 21-25% slow, its runs as fast as ever);
    // so did one whose in-pass probe reference (its quickest tenth) sits more than kMostDrift over
    // the quickest one-thread reading around it: the timing process ran the probe's GEMM slower
    // than this process did just before and after, and every op with it (session 61: two of ten
    // back-to-back timing runs had their reference at 2.15 ms against 1.50 ms, every GEMM 1.43x
    // slower; in the quiet ones the two read within 1%). Either way the ops are timed again, three
    // passes at most, and the steadiest is kept.
    constexpr double kMostDrift = 0.10;
    struct Pass {
      std::vector<std::vector<double>> before, after;
      nlohmann::ordered_json backend;
      planner::OpTimingDrift drift;  // none when the timing failed: stop there
    };
    std::vector<Pass> passes;
    std::string failure;
    const int kept = planner::steadiest_pass(
        [&](int k) {
          if (k > 0) {
            char line[200];
            const planner::OpTimingDrift& last = passes.back().drift;
            if (last.apart >= last.inside)
              std::snprintf(line, sizeof line,
                            "  host probe around the ops: medians after and before %.1f%% apart (more than %.0f%%: the "
                            "host changed speed during them); timing the ops again\n",
                            100 * last.apart, 100 * kMostDrift);
            else
              std::snprintf(line, sizeof line,
                            "  host probe during the ops: %.1f%% slower than around them (more than %.0f%%: the "
                            "timing process ran slow); timing the ops again\n",
                            100 * last.inside, 100 * kMostDrift);
            err << line;
          }
          Pass p;
          p.before = probe_all();
          const fs::path result = tmp / ("ops-" + tag + ".json"), log = tmp / ("ops-" + tag + ".log");
          std::vector<std::string> argv = {trainer_path().string(), "--time-ops", result.string()};
          if (quick) argv.push_back("--time-ops-quick");
          int rc = 0;
          const nlohmann::ordered_json r = run_for_json(argv, result, log, err, rc);
          p.after = probe_all();
          if (!r.is_object() || !r.contains("ops") || !r.contains("host_probe")) {
            failure = "calibrate --backend cpu: foresight-train --time-ops failed (exit " + std::to_string(rc) + ")\n";
          } else {
            p.backend = r;
            p.drift = planner::op_timing_drift(p.before[0], p.after[0], r["host_probe"]["reference_s"].get<double>());
          }
          passes.push_back(std::move(p));
          return passes.back().drift.drift();
        },
        kMostDrift, 3);
    if (!failure.empty()) {
      err << failure;
      return 1;
    }
    const auto& [before, after, backend, drift] = passes[std::size_t(kept)];
    j["ops"] = backend["ops"];
    j["memory"] = backend["memory"];
    j["ops_probe"] = nlohmann::ordered_json::array();
    std::vector<double> one_thread = before[0];
    one_thread.insert(one_thread.end(), after[0].begin(), after[0].end());
    const double reference = *std::min_element(one_thread.begin(), one_thread.end());
    for (std::size_t t = 0; t < before.size(); ++t) {
      // t + 1 threads against one, each at its quickest reading (planner::concurrent_rank_slowdown).
      std::vector<double> one = before[0], many = before[t];
      one.insert(one.end(), after[0].begin(), after[0].end());
      many.insert(many.end(), after[t].begin(), after[t].end());
      const double s = planner::concurrent_rank_slowdown({}, one, many, int(t) + 1, int(before.size()));
      j["ops_probe"].push_back({{"threads", t + 1}, {"probe_s", reference * s}});
    }
    j["ops_host_probe"] = backend["host_probe"];
    j["ops_passes"] = passes.size();
    j["ops_probe_lopsided"] = lopsided;
    j["ops_probe_drift"] = drift.apart;
    j["ops_probe_inside"] = drift.inside;
    char line[200];
    std::snprintf(line, sizeof line,
                  "  host probe around the ops: medians after and before %.1f%% apart, during them %.1f%% slower than "
                  "around them\n",
                  100 * drift.apart, 100 * drift.inside);
    err << line;
  } else {
    // A GPU backend: foresight-commbench links it (this binary does not) and times its ops, each
    // call as a step issues it, waiting for the device once per group of calls.
    const fs::path result = tmp / ("ops-" + tag + ".json"), log = tmp / ("ops-" + tag + ".log");
    std::vector<std::string> argv = {tool_path("foresight-commbench").string(), "--ops", "--backend", backend_name,
                                     "--out", result.string()};
    if (quick) argv.push_back("--quick");
    int rc = 0;
    const nlohmann::ordered_json r = run_for_json(argv, result, log, err, rc);
    if (!r.is_object() || !r.contains("ops") || !r.contains("memory")) {
      err << "calibrate: foresight-commbench --ops --backend " << backend_name << " failed (exit " << rc << ")\n";
      return rc == 2 ? kExitUserError : 1;
    }
    j["ops"] = r["ops"];
    j["memory"] = r["memory"];
    // One GPU: the loop's plans are single-rank, with no collectives and nothing to share.
    j["mpi"] = nlohmann::ordered_json::array();
    j["oversubscription"] = nlohmann::ordered_json::array({{{"ranks", 1}, {"slowdown", 1.0}}});
    j["launch"] = {{"mpirun", local_mpirun_template()}};
    j["duration_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomically(path, j.dump(1) + "\n", "--out");
    out << "Wrote " << path << " (" << j["duration_s"].get<double>() << " s)\n";
    return kExitOk;
  }

  // MPI collectives and the slowdown of concurrent ranks, launched as foresight-train is.
  const std::vector<std::string> launch = local_mpirun_template();
  auto mpirun = [&](int ranks, const std::vector<std::string>& args, const fs::path& result) -> nlohmann::json {
    std::vector<std::string> argv;
    for (std::string a : launch) argv.push_back(a == "{ranks}" ? std::to_string(ranks) : a);
    argv.push_back(tool_path("foresight-commbench").string());
    for (const auto& a : args) argv.push_back(a);
    argv.push_back("--out");
    argv.push_back(result.string());
    const fs::path log = tmp / ("commbench-" + tag + ".log");
    const int rc = run_logged(argv, log, 300);
    std::ifstream f(result);
    nlohmann::json r = rc == 0 && f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
    std::error_code ec;
    fs::remove(result, ec);
    if (rc != 0 || r.is_discarded() || r.is_null()) {
      err << "calibrate --backend cpu: mpirun foresight-commbench (" << ranks << " ranks) failed (exit " << rc
          << "): " << tail_of(log) << "\n";
      fs::remove(log, ec);
      return nlohmann::json();
    }
    fs::remove(log, ec);
    return r;
  };
  j["mpi"] = nlohmann::ordered_json::array();
  for (int ranks : {2, 4}) {
    if (ranks > 2 && ranks > cores) break;
    // Three launches, each size at its quickest (calibrate::quickest_collectives): a launch's
    // placement on a shared VM can slow every collective in it, and the runs are taken at their
    // quickest too. About 1.5 s a launch.
    std::vector<nlohmann::ordered_json> launches;
    for (int l = 0; l < 3; ++l) {
      const nlohmann::json r = mpirun(ranks, {"--collectives"}, tmp / ("commbench-" + tag + ".json"));
      if (r.is_null()) break;
      launches.push_back(r["collectives"]);
    }
    if (launches.size() < 3) break;
    const nlohmann::ordered_json collectives = calibrate::quickest_collectives(launches);
    j["mpi"].push_back({{"ranks", ranks}, {"collectives", collectives}});
    for (const auto& [name, c] : collectives.items()) {
      char line[160];
      std::snprintf(line, sizeof line, "  MPI %-11s %d ranks %7.2f us + %.3f GB/s\n", name.c_str(), ranks,
                    c["fixed_s"].get<double>() * 1e6,
                    c["per_byte_s"].get<double>() > 0 ? 1e-9 / c["per_byte_s"].get<double>() : 0.0);
      err << line;
    }
  }
  // Each count k > 1 timed right after a one-rank run, five times: a shared machine's slow spell
  // then spoils a pair, not the count, and a slow one-rank reference cannot make k ranks look
  // faster than one. planner::concurrent_rank_slowdown reads them: the median paired ratio beyond
  // the core count, each count's quickest run up to it (on this project's 2-vCPU VM two probe ranks
  // ran 1.00-1.01x one alone at quiet times and 1.2-1.4x in spells only two busy vCPUs meet, and the
  // median had put 1.02-1.23x into the profile's two-rank predictions).
  j["oversubscription"] = nlohmann::ordered_json::array();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // A pair during which other processes took more of this process's CPUs than the probes left idle
  // (/proc/stat, as validate --local guards its runs) measures their burst, not oversubscription:
  // it is timed again, three tries in all, and kept (and counted) only when no try was quiet.
  const double quiet_tolerance = LocalLoopOptions{}.quiet_tolerance;
  std::vector<double> alone_runs;
  // Counts 2 .. 2 x cores, or up to the most the caller will run (validate --local: its plans' ranks).
  const int most_ranks = max_concurrent_ranks > 0 ? std::max(2, max_concurrent_ranks) : 2 * cores;
  std::vector<std::vector<double>> ratios(std::size_t(most_ranks + 1)), absolute(std::size_t(most_ranks + 1));
  int disturbed_pairs = 0, lopsided_pairs = 0;
  // One probe run of `ranks` ranks and the slowdown other processes' CPU time implies for it.
  auto probe_run = [&](int ranks, double& others) {
    nlohmann::json r;
    others = others_slowdown_during(ranks, [&] { r = mpirun(ranks, {"--slowdown"}, tmp / ("slowdown-" + tag + ".json")); });
    return r;
  };
  // After three pairs in a row found the host busy in every try, the load is steady, not a
  // spell: the remaining pairs are timed once (retrying would only lengthen the calibration).
  int busy_in_a_row = 0;
  for (int round = 0; round < 5; ++round)
    for (int ranks = 2; ranks <= most_ranks; ++ranks) {
      nlohmann::json one, many;
      double worst = 1e30;
      const int tries = busy_in_a_row >= 3 ? 1 : 3;
      for (int attempt = 0; attempt < tries; ++attempt) {
        double others_one = 1, others_many = 1;
        nlohmann::json a = probe_run(1, others_one);
        nlohmann::json b = probe_run(ranks, others_many);
        if (a.is_null() || b.is_null()) break;  // (a failed launch is not retried; an earlier try stays)
        // The quietest try is kept.
        if (std::max(others_one, others_many) < worst) {
          worst = std::max(others_one, others_many);
          one = std::move(a);
          many = std::move(b);
        }
        if (worst <= 1.0 + quiet_tolerance) break;
      }
      if (one.is_null() || many.is_null()) continue;
      if (worst > 1.0 + quiet_tolerance) {
        ++disturbed_pairs;
        ++busy_in_a_row;
      } else {
        busy_in_a_row = 0;
      }
      // Each rank's time, read as planner::concurrent_probe_reading reads them: on a VM one rank's
      // vCPU can lose its core for a minute (the CI pre-check of session 62 read 1.18x at
      // calibration and its 2-rank plans ran at 1.0x a minute later).
      double concurrent = many["seconds"].get<double>();
      if (many.contains("per_rank_s") && many["per_rank_s"].is_array() && !many["per_rank_s"].empty() &&
          std::all_of(many["per_rank_s"].begin(), many["per_rank_s"].end(),
                      [](const nlohmann::json& x) { return x.is_number() && x.get<double>() > 0; })) {
        const planner::ProbeReading reading =
            planner::concurrent_probe_reading(many["per_rank_s"].get<std::vector<double>>(), cores, quiet_tolerance);
        concurrent = reading.seconds;
        lopsided_pairs += reading.at_quickest;
      }
      alone_runs.push_back(one["seconds"].get<double>());
      ratios[std::size_t(ranks)].push_back(concurrent / one["seconds"].get<double>());
      absolute[std::size_t(ranks)].push_back(concurrent);
    }
  j["oversubscription_disturbed_pairs"] = disturbed_pairs;
  j["oversubscription_lopsided_pairs"] = lopsided_pairs;
  if (lopsided_pairs > 0)
    err << "  " << lopsided_pairs << " concurrent probe run(s) read at their quickest rank (one rank's core was "
        << "slowed by something else: its rank ran more than " << int(100 * quiet_tolerance + 0.5)
        << "% behind)\n";
  if (disturbed_pairs > 0)
    err << "calibrate --backend cpu: " << disturbed_pairs
        << " oversubscription pair(s) kept although other processes were busy on these cores in every try\n";
  if (!alone_runs.empty()) {
    j["oversubscription"].push_back({{"ranks", 1}, {"slowdown", 1.0}, {"probe_s", median(alone_runs)}});
    for (int ranks = 2; ranks <= most_ranks; ++ranks) {
      if (ratios[std::size_t(ranks)].empty()) break;
      // Up to the core count the same contention was read a minute or more earlier, in this process,
      // as threads around the op timing (ops_probe): a spell can outlast all five pairs (a CI
      // pre-check's calibration, session 55, put its 2-rank predictions 20-28% slow while the
      // trainer's 2-rank steps minutes later ran at 1.0x), so the quieter reading stands.
      double threads_reading = 0;
      if (j.contains("ops_probe") && !j["ops_probe"].empty())
        for (const auto& o : j["ops_probe"])
          if (o["threads"].get<int>() == ranks)
            threads_reading = o["probe_s"].get<double>() / j["ops_probe"][0]["probe_s"].get<double>();
      const double s = planner::concurrent_rank_slowdown(ratios[std::size_t(ranks)], alone_runs,
                                                         absolute[std::size_t(ranks)], ranks, cores, threads_reading);
      j["oversubscription"].push_back(
          {{"ranks", ranks}, {"slowdown", s}, {"probe_s", median(absolute[std::size_t(ranks)])}});
      char line[96];
      std::snprintf(line, sizeof line, "  %d concurrent rank(s): %.2fx the time of one\n", ranks, s);
      err << line;
    }
  }
  j["launch"] = {{"mpirun", launch}};

  // The ops' step context (HostProfile::step_context): a declared calibration plan
  // (planner::context_calibration_case, none of the loop's) predicted from everything measured so
  // far and run three times, its quickest run's median step over that prediction. Its ops run
  // between the step's other calls, not in loops of their own, and there ran 10-30% slower
  // (session 59: one GEMM shape; caches ruled out); the plans validate --local checks are then
  // predicted with it, none of them run here.
  {
    // (A path of its own per attempt: profiles are cached by path within a process.)
    const fs::path cdir = tmp / ("context-" + tag + "-" + std::to_string(attempt));
    std::error_code ec;
    fs::remove_all(cdir, ec);
    fs::create_directories(cdir);
    const fs::path draft = cdir / "profile.json", plan_file = cdir / "plan.json";
    write_file_atomically(draft, j.dump(1) + "\n", "--out");
    planner::LoopCase c = planner::context_calibration_case(6);
    c.plan.checkpoint_dir = (cdir / "checkpoints").string();
    const double predicted = in_s(planner::predict_local(c, draft.string()).iteration);
    write_file_atomically(plan_file, to_json(c.plan).dump(2) + "\n", "--out");
    // Three runs at least, then more (eight at most) until a second run corroborates the quickest
    // within 3% (quiet runs here agree within 1%): a slow spell through the runs had left one
    // run quicker than the rest but still slowed, and its reading stood (quickest_run_corroborated).
    constexpr int kLeastRuns = 3, kMostRuns = 8;
    constexpr double kAgree = 0.03;
    std::vector<nlohmann::json> summaries;
    std::string failure;
    planner::LoopMeasurement m;
    for (int r = 0; r < kMostRuns; ++r) {
      const fs::path summary = cdir / ("summary-" + std::to_string(r) + ".json"), log = cdir / "train.log";
      const int rc = run_logged({trainer_path().string(), "--plan", plan_file.string(), "--summary", summary.string(),
                                 "--backend", "cpu", "--quiet", "--timeout-s", "120"},
                                log, 300);
      std::ifstream f(summary);
      summaries.push_back(rc == 0 && f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json());
      if (rc != 0) failure += "run " + std::to_string(r + 1) + " exited " + std::to_string(rc) + ": " + tail_of(log, 300) + "; ";
      if (r + 1 < kLeastRuns) continue;
      m = planner::measurement_from_summaries(summaries, {}, 0.0);
      if (!m.step_s || planner::quickest_run_corroborated(m.run_steps_s, kAgree)) break;
      if (r + 1 == kLeastRuns)
        err << "  step context: no two runs within " << int(kAgree * 100) << "% of the quickest (a slow spell); running again\n";
    }
    fs::remove_all(cdir, ec);
    if (!m.step_s) {
      err << "calibrate --backend cpu: the step-context plan (" << c.name << ") did not run: " << failure << m.error << "\n";
      return 1;
    }
    const double factor = *m.step_s / predicted;
    char line[200];
    std::snprintf(line, sizeof line, "  step context: %s ran %.4f s a step against %.4f s from the ops alone: %.3fx\n",
                  c.name.c_str(), *m.step_s, predicted, factor);
    err << line;
    // An op cannot run faster between a step's other calls than in a loop of its own; session 59
    // measured one GEMM shape at 1.10-1.30x, and quiet calibrations here read 1.00-1.10x (seven in
    // sessions 60-61): a factor outside [0.9, 1.15] says the host changed speed between the op
    // timing and these runs. A slow spell through the ops put one at 0.76x, every later run at the
    // quick speed (the concurrent-rank slowdown and MPI times read in the same spell predicted every
    // 2-rank plan 17-23% slow); one through these runs put one at 1.25x (session 61: three runs at
    // 0.146 s a step against 0.122-0.123 s on a quiet host), and validate --local with it predicted
    // all 15 plans 11-16% slow. Everything is then measured again, once.
    constexpr double kLeast = 0.9, kMost = 1.15;
    if ((factor < kLeast || factor > kMost) && attempt < 2) {
      std::snprintf(line, sizeof line,
                    "calibrate --backend cpu: step context %.3fx, outside [%.2f, %.2f]: the host changed speed "
                    "between the op timing and these runs; calibrating again\n",
                    factor, kLeast, kMost);
      err << line;
      return calibrate_attempt(path, backend_name, quick, out, err, max_concurrent_ranks, attempt + 1);
    }
    // Outside it twice, the reading is not the ops' context but the host's unsteadiness (its
    // speed in blocks of shapes timed back to back moved by up to +-30% from one calibration to the
    // next, session 60, and a ratio on one plan's shapes then misstates the others'): the ops are
    // taken as timed (factor 1) and the reading is kept beside it.
    const bool plausible = factor >= kLeast && factor <= kMost;
    if (!plausible)
      err << "calibrate --backend cpu: step context outside [" << kLeast << ", " << kMost
          << "] in a second calibration too: not used (factor 1; this host's speed is unsteady)\n";
    j["step_context"] = {{"plan", c.name},          {"micro_batch", c.plan.plan.micro_batch},
                         {"predicted_s", predicted}, {"measured_s", *m.step_s},
                         {"runs_s", m.run_steps_s},  {"measured_factor", factor},
                         {"factor", plausible ? factor : 1.0}};
  }
  j["duration_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomically(path, j.dump(1) + "\n", "--out");
  out << "Wrote " << path << " (" << j["duration_s"].get<double>() << " s)\n";
  if (j["mpi"].empty()) err << "calibrate --backend cpu: no MPI measurements (no mpirun or foresight-commbench): plans of more than one rank cannot be predicted from this profile\n";
  return kExitOk;
}

}  // namespace

int calibrate_trainer_backend(const std::string& path, const std::string& backend_name, bool quick, std::ostream& out,
                              std::ostream& err, int max_concurrent_ranks) {
  return calibrate_attempt(path, backend_name, quick, out, err, max_concurrent_ranks, 1);
}

int run_local_loop(const LocalLoopOptions& o, std::ostream& out, std::ostream& err) {
  if (o.backend != "cpu" && o.backend != "cuda")
    throw SpecError(SourceLocation{"<command line>", 0, 0}, "--backend", o.backend,
                    "must be cpu (the trainer's CPU backend on this host's cores) or cuda (its CUDA backend on "
                    "this host's GPU)");
  if (o.steps < 3)
    throw SpecError(SourceLocation{"<command line>", 0, 0}, "--steps", std::to_string(o.steps),
                    "must be at least 3 (the first step is warm-up; the median needs two more)");
  if (o.rounds < 1)
    throw SpecError(SourceLocation{"<command line>", 0, 0}, "--rounds", std::to_string(o.rounds), "must be at least 1");
  const fs::path dir = o.work_dir;
  const fs::path profile = o.profile.empty() ? dir / (o.backend + "-profile.json") : fs::path(o.profile);
  if (!o.profile.empty() && !fs::exists(profile))
    throw SpecError(SourceLocation{o.profile, 0, 0}, "--profile", o.profile, "does not exist");
  fs::create_directories(dir);

  // 1. Calibrate, unless a fresh profile of this host and these kernels is at hand. The slowdown of
  // concurrent ranks is timed up to the most this loop runs (the CPU backend: as many as cores, at
  // least 2), not up to twice the cores as `foresight calibrate` times it: on CI's two cores that
  // leaves out the 3- and 4-rank pairs, two thirds of that part (~30 s of an 80 s calibration).
  const int loop_ranks = o.max_ranks > 0 ? o.max_ranks : o.backend == "cpu" ? std::max(2, usable_cores()) : 1;
  std::string why;
  if (o.profile.empty() && !fresh_profile(profile, o.backend, loop_ranks, why)) {
    err << "validate --local: calibrating the trainer's " << o.backend << " backend (" << why << ") ...\n";
    const auto t0 = std::chrono::steady_clock::now();
    std::ostringstream cal_out;
    const int rc = calibrate_trainer_backend(profile.string(), o.backend, false, cal_out, err, loop_ranks);
    if (rc != 0) return rc;
    err << "validate --local: calibrated in "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s -> " << profile.string()
        << "\n";
  }
  const auto host = cost_models::cached_host_profile(profile.string());
  // The CPU backend: as many ranks as cores (at least 2); a GPU backend: one GPU, one rank, unless
  // --max-ranks says more GPUs are there.
  const int max_ranks = o.max_ranks > 0 ? o.max_ranks : o.backend == "cpu" ? std::max(2, host->cores) : 1;

  // 2. Predict every plan and write its plan.json, before anything runs.
  std::vector<planner::LoopCase> cases = planner::closed_loop_plans(max_ranks, o.steps);
  if (!o.plans.empty()) {
    std::vector<planner::LoopCase> chosen;
    for (const std::string& name : o.plans) {
      const auto it = std::find_if(cases.begin(), cases.end(), [&](const auto& c) { return c.name == name; });
      if (it == cases.end()) {
        std::string names;
        for (const auto& c : cases) names += (names.empty() ? "" : ", ") + c.name;
        throw SpecError(SourceLocation{"<command line>", 0, 0}, "--plans", name,
                        "is not a plan of the set for " + std::to_string(max_ranks) + " ranks (" + names + ")");
      }
      chosen.push_back(*it);
    }
    cases = std::move(chosen);
  }
  std::vector<sim::Prediction> predicted;
  for (planner::LoopCase& c : cases) {
    predicted.push_back(planner::predict_local(c, profile.string()));
    fs::create_directories(dir / c.name);
    c.plan.checkpoint_dir = (dir / c.name / "checkpoints").string();
    write_file_atomically(dir / c.name / "plan.json", to_json(c.plan).dump(2) + "\n", "--local");
  }

  // 3. Run them, in rounds over the whole set.
  const fs::path train = trainer_path();
  std::vector<std::vector<nlohmann::json>> summaries(cases.size());
  std::vector<std::string> failures(cases.size());
  // A run counts when the host runs the probe as fast as it did at calibration (within
  // o.quiet_tolerance) just before and just after it, and other processes took no more than the
  // cores it left idle while it ran (/proc/stat against this process's and its children's CPU
  // time, within the same tolerance): on a shared machine, a run made during another tenant's burst
  // measures the burst. Such a run is repeated (o.attempts in all); if none is quiet,
  // the quietest is kept and the case says so. Each plan's step time is then its quickest round
  // (planner::measurement_from_summaries): bursts inside a run escape these readings.
  std::vector<std::vector<double>> run_slowdown(cases.size());
  // The probe's readings around every kept run over the calibration's reference: the slowdown
  // above only counts readings over 1, so a calibration made in a slow spell (the host quicker
  // during the runs than at calibration, every prediction slow) shows here, below 1.
  std::vector<double> probe_vs_calibration;
  for (int round = 1; round <= o.rounds; ++round)
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const planner::LoopCase& c = cases[i];
      const fs::path run = dir / c.name;
      const fs::path summary = run / ("summary-" + std::to_string(round) + ".json");
      const fs::path log = run / ("train-" + std::to_string(round) + ".log");
      std::vector<std::string> argv;
      if (c.plan.gpus > 1) argv = mpirun_for(*host, c.plan.gpus);
      for (const std::string& a : {train.string(), std::string("--plan"), (run / "plan.json").string(),
                                   std::string("--summary"), summary.string(), std::string("--backend"), o.backend,
                                   std::string("--quiet"), std::string("--timeout-s"), std::string("120")})
        argv.push_back(a);
      const double reference = probe_reference(*host, c.plan.gpus);
      nlohmann::json best;
      double best_slow = 1e30, best_probe = 0;
      int rc = 0;
      for (int attempt = 1; attempt <= std::max(1, o.attempts); ++attempt) {
        err << "validate --local: round " << round << "/" << o.rounds << " [" << i + 1 << "/" << cases.size() << "] "
            << c.name << " on " << c.plan.gpus << " rank(s)" << (attempt > 1 ? " (again: the host was busy)" : "")
            << "\n";
        const double before = reference > 0 ? probe_now(c.plan.gpus, 0.15) / reference : 1.0;
        std::error_code ec;
        fs::remove(summary, ec);
        const double during = others_slowdown_during(c.plan.gpus, [&] { rc = run_logged(argv, log, 300); });
        const double after = reference > 0 ? probe_now(c.plan.gpus, 0.15) / reference : 1.0;
        if (rc != 0) break;
        std::ifstream f(summary);
        const nlohmann::json s = nlohmann::json::parse(f, nullptr, false);
        const double slow = std::max({before, during, after});
        if (slow < best_slow) {
          best_slow = slow;
          best = s;
          best_probe = reference > 0 ? std::sqrt(before * after) : 0.0;
        }
        if (slow <= 1.0 + o.quiet_tolerance) break;
      }
      if (rc != 0) {
        summaries[i].push_back(nlohmann::json());
        run_slowdown[i].push_back(0.0);
        failures[i] += "round " + std::to_string(round) + ": foresight-train exited " + std::to_string(rc) + ": " +
                       tail_of(log, 300) + "; ";
        continue;
      }
      run_slowdown[i].push_back(best_slow);
      summaries[i].push_back(best);
      if (best_probe > 0) probe_vs_calibration.push_back(best_probe);
    }
  std::vector<planner::LoopMeasurement> measured;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    planner::LoopMeasurement m = planner::measurement_from_summaries(summaries[i], run_slowdown[i], o.quiet_tolerance);
    if (!failures[i].empty()) m.error = failures[i] + m.error;
    measured.push_back(m);
  }

  // 4. Compare.
  nlohmann::ordered_json report = planner::closed_loop_json(cases, predicted, measured, o.backend, profile.string());
  if (o.backend == "cpu") report["step_context"] = host->step_context;
  if (!probe_vs_calibration.empty()) {
    std::sort(probe_vs_calibration.begin(), probe_vs_calibration.end());
    const std::size_t n = probe_vs_calibration.size();
    report["host_probe_vs_calibration"] = 0.5 * (probe_vs_calibration[(n - 1) / 2] + probe_vs_calibration[n / 2]);
  }
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
