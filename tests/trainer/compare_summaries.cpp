// Checks a foresight-train JSON summary against a reference run's: every step's loss within a
// relative tolerance (0 = bit-identical), optionally that the reference's loss went down and that
// the prediction sits beside the measurement, that every step moved a hand-computed number of MiB
// of activations to the host and back, and that the run's peak memory lies below the reference's.
// Prints the largest relative difference.
// With --expect-differ X the check is the converse: some step's loss must differ from the
// reference's by at least X (relative), both runs being complete and valid. --first-steps K
// compares steps 1..K only (the rest of the run must still be complete and valid). --expect-comm L:
// the run's messages were carried by L (its summary's "comm": mpi, nccl-standin, ...).
//   trainer_compare_summaries REF RUN [--rel X] [--expect-steps N] [--expect-decrease D] [--expect-prediction]
//                             [--expect-offload-MiB M] [--expect-less-memory] [--expect-differ X] [--first-steps K]
//                             [--expect-comm L]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace {

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return nlohmann::json::parse(in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s REF RUN [--rel X] [--expect-steps N] [--expect-decrease D] [--expect-prediction]\n", argv[0]);
    return 1;
  }
  const nlohmann::json ref = load(argv[1]), run = load(argv[2]);
  double rel = 1e-5, decrease = -1;
  int expect_steps = -1, first_steps = -1;
  bool prediction = false, less_memory = false;
  double offload_MiB = -1, differ = -1;
  std::string comm;  // the library that must have carried the run's messages (summary "comm")
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rel" && i + 1 < argc) rel = std::atof(argv[++i]);
    else if (a == "--expect-steps" && i + 1 < argc) expect_steps = std::atoi(argv[++i]);
    else if (a == "--expect-decrease" && i + 1 < argc) decrease = std::atof(argv[++i]);
    else if (a == "--expect-prediction") prediction = true;
    else if (a == "--expect-offload-MiB" && i + 1 < argc) offload_MiB = std::atof(argv[++i]);
    else if (a == "--expect-less-memory") less_memory = true;
    else if (a == "--expect-differ" && i + 1 < argc) differ = std::atof(argv[++i]);
    else if (a == "--first-steps" && i + 1 < argc) first_steps = std::atoi(argv[++i]);
    else if (a == "--expect-comm" && i + 1 < argc) comm = argv[++i];
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  bool ok = true;
  if (!comm.empty() && run.value("comm", std::string()) != comm) {
    std::printf("FAIL: messages carried by %s, expected %s\n", run.value("comm", std::string("(none)")).c_str(),
                comm.c_str());
    ok = false;
  }
  if (run["status"] != "ok") {
    std::printf("FAIL: run status is %s\n", run["status"].dump().c_str());
    ok = false;
  }
  std::map<int, double> ref_loss;
  for (const auto& s : ref["steps"]) ref_loss[s["step"].get<int>()] = s["loss"].get<double>();
  double worst = 0;
  int worst_step = 0, n = 0, lo = 0, hi = 0;  // steps compared: n of them, lo..hi
  for (const auto& s : run["steps"]) {
    const int step = s["step"].get<int>();
    if (first_steps >= 0 && step > first_steps) continue;
    const double loss = s["loss"].get<double>();
    if (!ref_loss.count(step)) {
      std::printf("FAIL: step %d is not in the reference\n", step);
      ok = false;
      continue;
    }
    const double d = std::abs(loss - ref_loss[step]) / std::abs(ref_loss[step]);
    if (d > worst || n == 0) {
      worst = d;
      worst_step = step;
    }
    lo = n == 0 ? step : std::min(lo, step);
    hi = n == 0 ? step : std::max(hi, step);
    ++n;
  }
  std::printf("%s vs %s: %d steps compared (%d..%d), layout tp=%d pp=%d dp=%d, max relative loss difference %.3e "
              "(step %d), tolerance %.1e\n",
              argv[2], argv[1], n, lo, hi,
              run["layout"]["tp"].get<int>(), run["layout"]["pp"].get<int>(), run["layout"]["dp"].get<int>(), worst,
              worst_step, rel);
  if (differ >= 0) {
    // The converse check: the runs must be told apart (a complete reference and run are required).
    std::printf("required: some step differs by at least %.1e\n", differ);
    if (worst < differ || n == 0 || ref_loss.empty()) ok = false;
  } else if (worst > rel) {
    ok = false;
  }
  if (expect_steps >= 0 && n != expect_steps) {
    std::printf("FAIL: %d steps, expected %d\n", n, expect_steps);
    ok = false;
  }
  if (decrease >= 0) {
    const auto& steps = ref["steps"];
    const double first = steps.front()["loss"].get<double>();
    double last = 0;
    const std::size_t k = std::min<std::size_t>(5, steps.size());
    for (std::size_t i = steps.size() - k; i < steps.size(); ++i) last += steps[i]["loss"].get<double>() / double(k);
    std::printf("reference loss: first step %.4f, mean of the last %zu steps %.4f (drop %.4f, required %.4f)\n", first,
                k, last, first - last, decrease);
    if (first - last < decrease) ok = false;
  }
  if (prediction) {
    const auto& p = run["predicted_vs_measured"];
    const bool has = p.is_object() && p["iteration_s"]["predicted"].is_number() && p["iteration_s"]["measured"].is_number();
    std::printf("predicted vs measured iteration: %s\n", has ? p["iteration_s"].dump().c_str() : "missing");
    if (!has) ok = false;
  }
  if (offload_MiB >= 0) {
    for (const auto& st : run["steps"]) {
      const double m = st["offload_MiB"].is_number() ? st["offload_MiB"].get<double>() : -1.0;
      if (std::abs(m - offload_MiB) > 1e-9 * offload_MiB) {
        std::printf("FAIL: step %d moved %.9f MiB of activations, expected %.9f\n", st["step"].get<int>(), m, offload_MiB);
        ok = false;
      }
    }
    std::printf("activation offload: expected %.6f MiB per step\n", offload_MiB);
  }
  if (less_memory) {
    auto peak = [](const nlohmann::json& j) {
      double m = 0;
      for (const auto& st : j["steps"]) m = std::max(m, st["memory_MiB"].get<double>());
      return m;
    };
    std::printf("peak memory: %.4f MiB, reference %.4f MiB\n", peak(run), peak(ref));
    if (!(peak(run) < peak(ref))) ok = false;
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
