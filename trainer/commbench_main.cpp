// foresight-commbench: what `foresight calibrate --backend cpu` launches under mpirun.
//   mpirun -np N foresight-commbench --collectives --out F   the trainer's MPI communicator: every
//       collective at message sizes 1 KiB .. 4 MiB (the slowest rank's time, median of repeats),
//       fitted as fixed + per-byte; bytes as the communication model counts them (all-gather its
//       output, reduce-scatter its input, all-to-all what each rank sends, send-recv one way).
//   mpirun -np N foresight-commbench --slowdown --out F      the GEMM probe on every rank at once:
//       the mean per-rank time (the caller divides by the one-rank time).
//   foresight-commbench --ops --backend cuda [--quick] --out F   every op of a trainer backend
//       (calibrate/cpu_bench.hpp measure_backend), for `foresight validate --local --backend cuda`:
//       the foresight binary itself does not link the CUDA backend.
// Rank 0 writes F as JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/cpu_bench.hpp"
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
/// synchronisation adds to the slowest rank's path. The mean over the middle 80% of the repeats
/// after a warm-up (the mismatch is noise: its mean, not its median, accumulates over a step).
double collective_time(Communicator& world, Backend& be, const std::function<void()>& f, int reps) {
  Tensor a = be.zeros(64, 128), b = be.zeros(128, 128), c = be.zeros(64, 128);
  std::vector<double> t;
  world.barrier();
  for (int i = 0; i <= reps; ++i) {
    be.matmul(c, a, false, b, false, false);
    const auto start = Clock::now();
    f();
    double d[1] = {std::chrono::duration<double>(Clock::now() - start).count()};
    world.all_reduce(d, ReduceOp::sum);
    if (i > 0) t.push_back(d[0] / world.size());
  }
  std::sort(t.begin(), t.end());
  const std::size_t cut = t.size() / 10;
  double sum = 0;
  for (std::size_t i = cut; i < t.size() - cut; ++i) sum += t[i];
  return sum / double(t.size() - 2 * cut);
}

nlohmann::ordered_json collectives(Communicator& world, Backend& be) {
  const int n = world.size(), me = world.rank();
  nlohmann::ordered_json out;
  std::vector<double> sizes;
  for (double b = 1024; b <= 4.0 * 1048576; b *= 4) sizes.push_back(b);
  auto elems = [&](double bytes) { return std::max<std::int64_t>(n, std::int64_t(bytes / 4) / n * n); };
  auto fit = [&](const char* name, const std::function<double(double)>& run) {
    std::vector<double> xs, ts;
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    for (double b : sizes) {
      const double t = run(b);
      xs.push_back(double(elems(b)) * 4);
      ts.push_back(t);
      samples.push_back({{"bytes", xs.back()}, {"time_s", t}});
    }
    const calibrate::LinearFitResult f = calibrate::fit_linear(xs, ts);
    out[name] = {{"fixed_s", f.fixed_s}, {"per_byte_s", f.per_unit_s}, {"samples", samples}};
  };
  auto reps = [](double bytes) { return bytes >= 1048576 ? 10 : 40; };
  fit("all_reduce", [&](double b) {
    Tensor t = be.zeros(elems(b), 1);
    return collective_time(world, be, [&] { world.all_reduce(t, ReduceOp::sum); }, reps(b));
  });
  fit("all_gather", [&](double b) {
    Tensor o = be.zeros(elems(b), 1), i = be.zeros(elems(b) / n, 1);
    return collective_time(world, be, [&] { world.all_gather(o, i); }, reps(b));
  });
  fit("reduce_scatter", [&](double b) {
    Tensor i = be.zeros(elems(b), 1), o = be.zeros(elems(b) / n, 1);
    return collective_time(world, be, [&] { world.reduce_scatter(o, i, ReduceOp::sum); }, reps(b));
  });
  fit("all_to_all", [&](double b) {
    Tensor i = be.zeros(elems(b), 1), o = be.zeros(elems(b), 1);
    return collective_time(world, be, [&] { world.all_to_all(o, i); }, reps(b));
  });
  // One way between ranks 0 and 1: half a ping-pong (the others wait at the barrier).
  fit("send_recv", [&](double b) {
    Tensor t = be.zeros(elems(b), 1);
    return 0.5 * collective_time(world, be, [&] {
      if (me == 0) {
        world.send(t, 1, 7)->wait();
        world.recv(t, 1, 8);
      } else if (me == 1) {
        world.recv(t, 0, 7);
        world.send(t, 0, 8)->wait();
      }
    }, reps(b));
  });
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
    double t[1] = {calibrate::slowdown_probe_seconds(0.25)};
    world->all_reduce(t, ReduceOp::sum);
    j["seconds"] = t[0] / world->size();
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
