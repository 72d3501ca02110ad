// foresight-commbench: what `foresight calibrate --backend cpu` launches under mpirun.
//   mpirun -np N foresight-commbench --collectives --out F   the trainer's MPI communicator: every
//       collective at message sizes 1 KiB .. 4 MiB (the ranks' mean time, in interleaved rounds),
//       fitted as fixed + per-byte; bytes as the communication model counts them (all-gather its
//       output, reduce-scatter its input, all-to-all what each rank sends, send-recv one way).
//   mpirun -np N foresight-commbench --slowdown --out F      the GEMM probe on every rank at once:
//       the mean per-rank time (the caller divides by the one-rank time) and each rank's.
//   foresight-commbench --ops --backend cuda [--quick] --out F   every op of a trainer backend
//       (calibrate/cpu_bench.hpp measure_backend), for `foresight validate --local --backend cuda`:
//       the foresight binary itself does not link the CUDA backend.
// Rank 0 writes F as JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/cpu_bench.hpp"
#include "calibrate/stats.hpp"
#include "trainer/backend.hpp"
#include "trainer/bootstrap.hpp"
#include "trainer/cpu_backend.hpp"

using namespace foresight;
using namespace foresight::trainer;

namespace {

using Clock = std::chrono::steady_clock;

/// A collective as the trainer meets it: right after a stretch of compute (a GEMM of about 0.2 ms,
/// the length of the work between two tensor-parallel collectives of a small GPT). Each rank times
/// the collective from its call to its return, so the rank that arrives first also waits for the
/// other: the mean over ranks is the transfer plus half the ranks' mismatch, which is what each
/// synchronisation adds to the slowest rank's path.
struct CollectiveCase {
  std::string name;
  double bytes = 0;                        // as the communication model counts them
  int reps_per_round = 0;
  std::function<void()> run;
  std::vector<std::vector<double>> rounds;  // the repeats' times, round by round
};

/// Every collective at every size, timed in interleaved rounds: each round runs a few repeats of
/// every case in turn, and a case's time is the median over rounds of each round's mean
/// (calibrate::median_of_round_means). Timed case after case instead, a slow spell of the shared
/// host landed on one case whole: a CI-like VM measured a 1 KiB reduce-scatter at 1.37 ms beside a
/// 50 us all-gather and 1 MiB at 3.1 ms beside 4 MiB at 1.5 ms, and the fitted 0.37 ms fixed cost
/// predicted the sequence-parallel plan 29% slow (session 60).
void time_in_rounds(Communicator& world, Backend& be, std::vector<CollectiveCase>& cases, int rounds) {
  Tensor a = be.zeros(64, 128), b = be.zeros(128, 128), c = be.zeros(64, 128);
  auto once = [&](CollectiveCase& k) {
    be.matmul(c, a, false, b, false, false);
    const auto start = Clock::now();
    k.run();
    double d[1] = {std::chrono::duration<double>(Clock::now() - start).count()};
    world.all_reduce(d, ReduceOp::sum);
    return d[0] / world.size();
  };
  world.barrier();
  for (auto& k : cases) (void)once(k);  // warm-up: buffers touched, connections made
  for (int r = 0; r < rounds; ++r)
    for (auto& k : cases) {
      std::vector<double> t;
      for (int i = 0; i < k.reps_per_round; ++i) t.push_back(once(k));
      k.rounds.push_back(std::move(t));
    }
}

nlohmann::ordered_json collectives(Communicator& world, Backend& be) {
  const int n = world.size(), me = world.rank();
  std::vector<double> sizes;
  for (double b = 1024; b <= 4.0 * 1048576; b *= 4) sizes.push_back(b);
  auto elems = [&](double bytes) { return std::max<std::int64_t>(n, std::int64_t(bytes / 4) / n * n); };
  // Seven rounds of 8 repeats (40 in one run before session 60), 3 from 1 MiB up: about a second
  // on two ranks.
  constexpr int kRounds = 7;
  auto reps = [](double bytes) { return bytes >= 1048576 ? 3 : 8; };
  // Each case holds its buffers (Tensor shares its storage), alive across the rounds.
  std::vector<CollectiveCase> cases;
  auto add = [&](const char* name, double b, std::function<void()> run) {
    cases.push_back({name, double(elems(b)) * 4, reps(b), std::move(run), {}});
  };
  for (double b : sizes) {
    Tensor t = be.zeros(elems(b), 1);
    add("all_reduce", b, [&world, t]() mutable { world.all_reduce(t, ReduceOp::sum); });
  }
  for (double b : sizes) {
    Tensor o = be.zeros(elems(b), 1), i = be.zeros(elems(b) / n, 1);
    add("all_gather", b, [&world, o, i]() mutable { world.all_gather(o, i); });
  }
  for (double b : sizes) {
    Tensor i = be.zeros(elems(b), 1), o = be.zeros(elems(b) / n, 1);
    add("reduce_scatter", b, [&world, o, i]() mutable { world.reduce_scatter(o, i, ReduceOp::sum); });
  }
  for (double b : sizes) {
    Tensor i = be.zeros(elems(b), 1), o = be.zeros(elems(b), 1);
    add("all_to_all", b, [&world, o, i]() mutable { world.all_to_all(o, i); });
  }
  // One way between ranks 0 and 1: a ping-pong, halved below (the others wait for it to finish).
  for (double b : sizes) {
    Tensor t = be.zeros(elems(b), 1);
    add("send_recv", b, [&world, t, me]() mutable {
      if (me == 0) {
        world.send(t, 1, 7)->wait();
        world.recv(t, 1, 8);
      } else if (me == 1) {
        world.recv(t, 0, 7);
        world.send(t, 0, 8)->wait();
      }
    });
  }
  time_in_rounds(world, be, cases, kRounds);

  nlohmann::ordered_json out;
  for (std::size_t first = 0; first < cases.size(); first += sizes.size()) {
    const std::string& name = cases[first].name;
    std::vector<double> xs, ts;
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    for (std::size_t k = first; k < first + sizes.size(); ++k) {
      const double t = (name == "send_recv" ? 0.5 : 1.0) * calibrate::median_of_round_means(cases[k].rounds);
      xs.push_back(cases[k].bytes);
      ts.push_back(t);
      samples.push_back({{"bytes", cases[k].bytes}, {"time_s", t}, {"rounds", kRounds}});
    }
    const calibrate::LinearFitResult f = calibrate::fit_linear(xs, ts);
    out[name] = {{"fixed_s", f.fixed_s}, {"per_byte_s", f.per_unit_s}, {"samples", samples}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);
  std::string out_path, backend = "cpu";
  bool slowdown = false, comm = false, ops = false, quick = false;
  const char* usage =
      "usage: mpirun -np N foresight-commbench (--collectives | --slowdown) --out FILE\n"
      "       foresight-commbench --ops [--backend cpu|cuda] [--quick] --out FILE\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (a == "--slowdown") slowdown = true;
    else if (a == "--collectives") comm = true;
    else if (a == "--ops") ops = true;
    else if (a == "--quick") quick = true;
    else {
      std::cerr << "foresight-commbench: unknown argument '" << a << "'\n" << usage;
      return 2;
    }
  }
  if (out_path.empty() || int(slowdown) + int(comm) + int(ops) != 1) {
    std::cerr << usage;
    return 2;
  }
  if (ops) {
    std::unique_ptr<Backend> be;
    try {
      be = make_backend(backend);
    } catch (const std::exception& e) {
      std::cerr << "foresight-commbench: --backend " << backend << ": " << e.what() << "\n";
      return 2;
    }
    // Waiting for the device: a reduction whose result comes back to the host.
    Tensor one = be->zeros(1, 1);
    const nlohmann::ordered_json j =
        calibrate::measure_backend(*be, [&] { (void)be->sum_squares(one); }, {.quick = quick, .host_probe = {}}, std::cerr);
    std::ofstream f(out_path);
    f << j.dump(1) << "\n";
    return f ? 0 : 1;
  }
  auto world = runtime.world();
  auto be = make_cpu_backend();
  nlohmann::ordered_json j;
  j["ranks"] = world->size();
  if (comm) {
    if (world->size() < 2) {
      std::cerr << "foresight-commbench: --collectives needs at least 2 ranks\n";
      return 2;
    }
    j["collectives"] = collectives(*world, *be);
  } else {
    world->barrier();
    // Each rank's time in its own slot (the others 0), summed: every rank's time on rank 0. The
    // caller reads the mean, and the spread: ranks on cores of their own slow each other alike.
    std::vector<double> t(std::size_t(world->size()), 0.0);
    t[std::size_t(world->rank())] = calibrate::slowdown_probe_seconds(0.25);
    world->all_reduce(std::span<double>(t), ReduceOp::sum);
    double sum = 0;
    for (double x : t) sum += x;
    j["seconds"] = sum / world->size();
    j["per_rank_s"] = t;
  }
  if (world->rank() == 0) {
    std::ofstream f(out_path);
    f << j.dump(1) << "\n";
    if (!f) {
      std::cerr << "foresight-commbench: cannot write " << out_path << "\n";
      return 1;
    }
  }
  world->barrier();
  return 0;
}
