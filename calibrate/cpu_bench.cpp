#include "calibrate/cpu_bench.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "calibrate/stats.hpp"
#include "core/error.hpp"
#include "trainer/cpu_backend.hpp"

namespace foresight::calibrate {

using trainer::AdamWStep;
using trainer::AttentionShape;
using trainer::Backend;
using trainer::Tensor;
using trainer::TokenPositions;

LinearFitResult fit_linear(const std::vector<double>& units, const std::vector<double>& times) {
  FORESIGHT_CHECK(units.size() == times.size() && units.size() >= 2) << units.size() << " samples";
  const long n = long(units.size());
  // Relative residuals: row i is (1 / t_i, u_i / t_i) . (a, b) = 1.
  Eigen::MatrixXd A(n, 2);
  Eigen::VectorXd ones = Eigen::VectorXd::Ones(n);
  for (long i = 0; i < n; ++i) {
    FORESIGHT_CHECK(times[std::size_t(i)] > 0) << "time " << times[std::size_t(i)];
    A(i, 0) = 1.0 / times[std::size_t(i)];
    A(i, 1) = units[std::size_t(i)] / times[std::size_t(i)];
  }
  Eigen::Vector2d ab = A.colPivHouseholderQr().solve(ones);
  LinearFitResult r{.fixed_s = ab(0), .per_unit_s = ab(1)};
  if (r.fixed_s < 0 || r.per_unit_s < 0) {
    // The non-negative optimum lies on a boundary: through the origin (a = 0: minimise
    // sum (b u_i / t_i - 1)^2) or flat (b = 0: minimise sum (a / t_i - 1)^2), whichever fits
    // better. Flat is what a GPU op at launch-bound sizes measures (every size ~4.5 us on the
    // first H200 run, reports/gpu-2026-11-28); through the origin gave those ops no cost at all.
    auto cost = [&](double a, double b) { return (A.col(0) * a + A.col(1) * b - ones).squaredNorm(); };
    const Eigen::VectorXd x = A.col(1), w = A.col(0);
    const double b0 = std::max(0.0, x.dot(ones) / x.dot(x)), a0 = std::max(0.0, w.dot(ones) / w.dot(w));
    if (cost(0, b0) <= cost(a0, 0)) {
      r.fixed_s = 0;
      r.per_unit_s = b0;
    } else {
      r.fixed_s = a0;
      r.per_unit_s = 0;
    }
  }
  for (long i = 0; i < n; ++i)
    r.max_rel_residual = std::max(r.max_rel_residual, std::abs((r.fixed_s + r.per_unit_s * units[std::size_t(i)]) /
                                                                   times[std::size_t(i)] -
                                                               1.0));
  return r;
}

nlohmann::ordered_json quickest_collectives(const std::vector<nlohmann::ordered_json>& launches) {
  FORESIGHT_CHECK(!launches.empty()) << "no launch to merge";
  nlohmann::ordered_json out;
  for (const auto& [name, first] : launches.front().items()) {
    const auto& samples = first.at("samples");
    std::vector<double> bytes, times;
    nlohmann::ordered_json merged = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const double b = samples[i].at("bytes").get<double>();
      double t = samples[i].at("time_s").get<double>();
      for (std::size_t k = 1; k < launches.size(); ++k) {
        const auto& other = launches[k].at(name).at("samples");
        FORESIGHT_CHECK(other.size() == samples.size() && other[i].at("bytes").get<double>() == b)
            << name << ": launch " << k << " timed other sizes than launch 0";
        t = std::min(t, other[i].at("time_s").get<double>());
      }
      bytes.push_back(b);
      times.push_back(t);
      merged.push_back({{"bytes", b}, {"time_s", t}});
    }
    const LinearFitResult f = fit_linear(bytes, times);
    out[name] = {{"fixed_s", f.fixed_s}, {"per_byte_s", f.per_unit_s}, {"launches", launches.size()}, {"samples", merged}};
  }
  return out;
}

double median_time(const std::function<void()>& f, int reps) {
  using Clock = std::chrono::steady_clock;
  f();  // warm-up: page faults, caches
  std::vector<double> t;
  for (int i = 0; i < std::max(1, reps); ++i) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double settled_time(const std::vector<ProbedTiming>& timings, const std::vector<double>& readings, double reference_s,
                    double* largest_scale) {
  FORESIGHT_CHECK(!timings.empty()) << "a sample without a timing";
  std::vector<double> t;
  for (const ProbedTiming& x : timings) {
    double slowness = 1;
    if (x.reading >= 0 && reference_s > 0) {
      FORESIGHT_CHECK(std::size_t(x.reading) + 1 < readings.size())
          << "timing stated against reading " << x.reading << " of " << readings.size();
      // The probe's time around the timing: the mean of the readings before and after it.
      slowness = 0.5 * (readings[std::size_t(x.reading)] + readings[std::size_t(x.reading) + 1]) / reference_s;
    }
    if (largest_scale) *largest_scale = std::max(*largest_scale, slowness);
    t.push_back(x.time_s / std::max(1.0, slowness));
  }
  return quantile(t, 0.5);
}

namespace {

// Repeats: enough to take a median, fewer for long calls (a pass stays short).
int reps_for(double seconds) { return seconds > 0.05 ? 1 : seconds > 0.01 ? 3 : 5; }

// Calls in a group that lasts about 2 ms, from one call's time (200 at most, 1 at least).
int calls_for(double first_s) { return std::clamp(int(2e-3 / std::max(first_s, 1e-9)), 1, 200); }

/// Seconds per call of `f` as a training step meets it: calls issued back to back and waited for
/// once (`sync`; nothing on the CPU backend, a device round trip on a GPU backend, whose calls
/// are asynchronous), in groups of enough calls to last about 2 ms; the median group.
double timed_with(const std::function<void()>& f, const std::function<void()>& sync) {
  using Clock = std::chrono::steady_clock;
  f();
  sync();
  auto a = Clock::now();
  f();
  sync();
  const double first = std::chrono::duration<double>(Clock::now() - a).count();
  const int calls = calls_for(first);
  std::vector<double> t;
  for (int g = 0; g < reps_for(first); ++g) {
    a = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    sync();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// A linear op measured at `sizes` units: samples and fit.
nlohmann::ordered_json linear_op(const char* unit, const std::vector<double>& sizes,
                                 const std::function<double(double)>& run, std::ostream& log, const char* name) {
  std::vector<double> times;
  nlohmann::ordered_json samples = nlohmann::ordered_json::array();
  for (double u : sizes) {
    times.push_back(run(u));
    samples.push_back({{"units", u}, {"time_s", times.back()}});
  }
  const LinearFitResult f = fit_linear(sizes, times);
  char line[160];
  std::snprintf(line, sizeof line, "  %-26s %8.2f us + %7.3f ns/%s (largest residual %.1f%%)\n", name, f.fixed_s * 1e6,
                f.per_unit_s * 1e9, unit, 100 * f.max_rel_residual);
  log << line;
  return {{"unit", unit}, {"fixed_s", f.fixed_s}, {"per_unit_s", f.per_unit_s}, {"samples", samples}};
}

}  // namespace

namespace {

/// The host probe's GEMM: a (128 x 256) x (256 x 256) product of the CPU backend, about 2 ms on one
/// core.
struct ProbeGemm {
  std::unique_ptr<Backend> be = trainer::make_cpu_backend();
  Tensor a = be->zeros(128, 256), b = be->zeros(256, 256), c = be->zeros(128, 256);
  void operator()() { be->matmul(c, a, false, b, false, false); }
};

}  // namespace

double slowdown_probe_seconds(double duration_s) {
  using Clock = std::chrono::steady_clock;
  ProbeGemm probe;
  probe();  // warm-up
  // Calls for a fixed wall time, so that ranks started together overlap for all of it.
  const auto start = Clock::now();
  long calls = 0;
  double elapsed = 0;
  do {
    probe();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < duration_s);
  return elapsed / double(calls);
}

double probe_median_seconds() {
  ProbeGemm probe;
  return median_time([&] { probe(); }, 15);
}

namespace {

/// The host probe's readings during a pass: one at the first timing and then whenever half a
/// second has gone by, one more at the end of the pass.
struct ProbeTrack {
  std::function<double()> probe;
  std::vector<double> readings;
  std::chrono::steady_clock::time_point last{};
  /// The index of the reading a timing made now is stated against (-1 without a probe).
  long before_timing() {
    if (!probe) return -1;
    if (readings.empty() || std::chrono::steady_clock::now() - last > std::chrono::milliseconds(500)) {
      readings.push_back(probe());
      last = std::chrono::steady_clock::now();
    }
    return long(readings.size()) - 1;
  }
  void finish() {
    if (probe) readings.push_back(probe());
  }
};

/// A pass's samples and, for each in samples_in_order's order, its timings (one per round).
struct Pass {
  nlohmann::ordered_json j;
  std::vector<std::vector<ProbedTiming>> timings;
};

Pass measure_pass(Backend& backend, const std::function<void()>& sync, const CpuBenchOptions& o, std::ostream& log,
                  ProbeTrack& track) {
  Backend* be = &backend;
  Pass pass;
  nlohmann::ordered_json& j = pass.j;
  // ---- GEMMs: a log2 grid; the largest products left out (they take seconds and no small GPT has them).
  // Timed in rounds, each round one short timing of every shape, the rounds starting at different
  // shapes: on a shared VM the host's speed moves over seconds, and shapes timed back to back had
  // moved together by up to +-30% from one calibration to the next (notes/status.md, session 60).
  // A slow spell now lands on one round of many shapes, which each shape's median over its rounds
  // sets aside, instead of on every timing of a block of neighbouring shapes.
  const std::vector<int> ms = o.quick ? std::vector<int>{32, 128, 512} : std::vector<int>{32, 64, 128, 256, 512};
  const std::vector<int> nks =
      o.quick ? std::vector<int>{32, 128, 512} : std::vector<int>{32, 64, 128, 256, 512, 1024};
  const double max_macs = o.quick ? double(1 << 22) : double(1 << 25);
  const char* names[3] = {"matmul_nn", "matmul_nt", "matmul_tn"};
  struct Shape {
    int v, m, n, k;
  };
  std::vector<Shape> shapes;
  for (int v = 0; v < 3; ++v)
    for (int m : ms)
      for (int n : nks)
        for (int k : nks)
          if (double(m) * n * k <= max_macs) shapes.push_back({v, m, n, k});
  pass.timings.resize(shapes.size());
  // A round times one group of calls lasting about 2 ms (one call for the largest shapes), the
  // group's size set by a first, untimed call in round 0; later rounds call on operands just
  // filled, so no warm-up call (it had made the rounds cost 3x the calls of one back-to-back timing
  // for the largest shapes).
  std::vector<int> calls(shapes.size(), 0);
  const int rounds = o.quick ? 3 : 5;
  for (int r = 0; r < rounds; ++r) {
    const std::size_t start = std::size_t(r) * shapes.size() / std::size_t(rounds);
    for (std::size_t q = 0; q < shapes.size(); ++q) {
      const std::size_t i = (start + q) % shapes.size();
      const auto [v, m, n, k] = shapes[i];
      const bool ta = v == 2, tb = v == 1;
      Tensor a = ta ? be->zeros(k, m) : be->zeros(m, k);
      Tensor b = tb ? be->zeros(n, k) : be->zeros(k, n);
      Tensor c = be->zeros(m, n);
      be->fill(a, 0.5f);
      be->fill(b, 0.25f);
      auto call = [&] { be->matmul(c, a, ta, b, tb, ta); };  // tn accumulates, as weight gradients do
      if (calls[i] == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        call();
        sync();
        const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        calls[i] = calls_for(first);
      }
      const long reading = track.before_timing();
      const auto t0 = std::chrono::steady_clock::now();
      for (int c_ = 0; c_ < calls[i]; ++c_) call();
      sync();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls[i];
      pass.timings[i].push_back({.time_s = t, .reading = reading});
    }
  }
  for (int v = 0; v < 3; ++v) {
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    double lo = 1e30, hi = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      if (shapes[i].v != v) continue;
      const double macs = double(shapes[i].m) * shapes[i].n * shapes[i].k;
      const double t = settled_time(pass.timings[i], {}, 0, nullptr);
      samples.push_back({{"m", shapes[i].m}, {"n", shapes[i].n}, {"k", shapes[i].k}, {"time_s", t}});
      lo = std::min(lo, 2 * macs / t);
      hi = std::max(hi, 2 * macs / t);
    }
    char line[160];
    std::snprintf(line, sizeof line, "  %-26s %3zu shapes, %.2f - %.2f GFLOP/s\n", names[v], samples.size(), lo / 1e9,
                  hi / 1e9);
    log << line;
    j["ops"][names[v]] = {{"samples", samples}};
  }
  // Every other op's samples one after another, each one timing.
  auto timed = [&sync, &track, &pass](const std::function<void()>& f) {
    const long reading = track.before_timing();
    const double t = timed_with(f, sync);
    pass.timings.push_back({{.time_s = t, .reading = reading}});
    return t;
  };

  // ---- Everything else, fixed + per unit.
  const double C = 64;  // row width of the (rows, C) tensors
  const std::vector<double> el = {4096, 16384, 65536, 262144};
  auto rows = [&](double u) { return std::int64_t(u / C); };
  auto& ops = j["ops"];
  ops["zeros"] = linear_op("element", el, [&](double u) { return timed([&] { Tensor t = be->zeros(rows(u), std::int64_t(C)); }); }, log, "zeros");
  auto pair = [&](double u, const std::function<void(Tensor&, Tensor&)>& f) {
    Tensor a = be->zeros(rows(u), std::int64_t(C)), b = be->zeros(rows(u), std::int64_t(C));
    be->fill(b, 0.5f);
    return timed([&] { f(a, b); });
  };
  ops["copy"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor& b) { be->copy(a, b); }); }, log, "copy");
  ops["add"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor& b) { be->add(a, b); }); }, log, "add");
  Tensor bias = be->zeros(1, std::int64_t(C));
  ops["add_bias"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor&) { be->add_bias(a, bias); }); }, log, "add_bias");
  ops["bias_backward"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor&) { be->bias_backward(bias, a); }); }, log, "bias_backward");
  ops["sum_squares"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor&) { (void)be->sum_squares(a); }); }, log, "sum_squares");
  ops["gelu_forward"] = linear_op("element", el, [&](double u) { return pair(u, [&](Tensor& a, Tensor& b) { be->gelu_forward(a, b); }); }, log, "gelu_forward");
  ops["gelu_backward"] = linear_op("element", el, [&](double u) {
    Tensor dy = be->zeros(rows(u), std::int64_t(C));
    be->fill(dy, 1.0f);
    return pair(u, [&](Tensor& a, Tensor& b) { be->gelu_backward(a, dy, b); });
  }, log, "gelu_backward");
  Tensor g = be->zeros(1, std::int64_t(C)), beta = be->zeros(1, std::int64_t(C));
  be->fill(g, 1.0f);
  ops["layernorm_forward"] = linear_op("element", el, [&](double u) {
    Tensor mean = be->zeros(rows(u), 1), rstd = be->zeros(rows(u), 1);
    return pair(u, [&](Tensor& y, Tensor& x) { be->layernorm_forward(y, mean, rstd, x, g, beta); });
  }, log, "layernorm_forward");
  ops["layernorm_backward"] = linear_op("element", el, [&](double u) {
    Tensor mean = be->zeros(rows(u), 1), rstd = be->zeros(rows(u), 1), dy = be->zeros(rows(u), std::int64_t(C));
    be->fill(rstd, 1.0f);
    be->fill(dy, 0.5f);
    Tensor dg = be->zeros(1, std::int64_t(C)), db = be->zeros(1, std::int64_t(C));
    return pair(u, [&](Tensor& dx, Tensor& x) { be->layernorm_backward(dx, dg, db, dy, x, mean, rstd, g); });
  }, log, "layernorm_backward");
  ops["adamw"] = linear_op("parameter", el, [&](double u) {
    Tensor p = be->zeros(std::int64_t(u), 1), gr = be->zeros(std::int64_t(u), 1), m = be->zeros(std::int64_t(u), 1),
           v = be->zeros(std::int64_t(u), 1);
    be->fill(gr, 0.01f);
    const AdamWStep h{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1.0f, .step = 1};
    return timed([&] { be->adamw(p, gr, m, v, h); });
  }, log, "adamw");
  // Attention: batch 2, 4 heads of 16, causal over `seq` positions; units = the (query, key)
  // pairs computed times the head dim.
  auto attention = [&](bool backward, double seq) {
    const int S = int(seq), heads = 4, D = 16, HD = heads * D;
    const AttentionShape s{.batch = 2, .seq = S, .heads = heads, .head_dim = D, .context = 0};
    Tensor qkv = be->zeros(2 * S, 3 * HD), out = be->zeros(2 * S, HD), probs = be->zeros(2 * heads * S, S),
           d = be->zeros(2 * S, 3 * HD), dout = be->zeros(2 * S, HD);
    be->fill(qkv, 0.1f);
    be->fill(dout, 0.1f);
    be->attention_forward(out, probs, qkv, qkv, s);
    return backward ? timed([&] { be->attention_backward(d, d, dout, out, probs, qkv, qkv, s); })
                    : timed([&] { be->attention_forward(out, probs, qkv, qkv, s); });
  };
  const std::vector<double> seqs = {16, 32, 64, 128, 256};
  std::vector<double> att_units;
  for (double S : seqs) att_units.push_back(2.0 * 4 * (S * (S + 1) / 2) * 16);
  auto att_op = [&](bool backward, const char* name) {
    std::size_t i = 0;
    return linear_op("score_dim", att_units, [&](double) { return attention(backward, seqs[i++]); }, log, name);
  };
  ops["attention_forward"] = att_op(false, "attention_forward");
  ops["attention_backward"] = att_op(true, "attention_backward");
  // Embedding and positions: tokens x C elements from a 256-row table and 64 positions.
  std::vector<std::int32_t> tokens(std::size_t(262144 / C));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::int32_t((i * 37) % 256);
  Tensor table = be->zeros(256, std::int64_t(C)), positions = be->zeros(64, std::int64_t(C));
  auto tok = [&](double u) { return std::span<const std::int32_t>(tokens.data(), std::size_t(rows(u))); };
  ops["embedding_forward"] = linear_op("element", el, [&](double u) {
    return pair(u, [&](Tensor& x, Tensor&) { be->embedding_forward(x, table, tok(u), 0); });
  }, log, "embedding_forward");
  ops["embedding_backward"] = linear_op("element", el, [&](double u) {
    return pair(u, [&](Tensor&, Tensor& dx) { be->embedding_backward(table, dx, tok(u), 0); });
  }, log, "embedding_backward");
  ops["add_positions"] = linear_op("element", el, [&](double u) {
    return pair(u, [&](Tensor& x, Tensor&) { be->add_positions(x, positions, TokenPositions{.first_row = 0, .period = 64, .offset = 0}); });
  }, log, "add_positions");
  ops["positions_backward"] = linear_op("element", el, [&](double u) {
    return pair(u, [&](Tensor&, Tensor& dx) { be->positions_backward(positions, dx, TokenPositions{.first_row = 0, .period = 64, .offset = 0}); });
  }, log, "positions_backward");
  // The MoE combine's ops (trainer/moe.cpp): each output row gathers k = 2 rows of a source twice
  // its height (as a capacity-factor-1 combine reads E x capacity = N x k slot rows), every third
  // choice dropped; units = output elements x k, the terms summed. row_dots: one pair per choice,
  // units = pairs x C, the multiply-adds.
  const int gk = 2;
  auto choice_rows = [&](double u) {
    const std::int64_t choices = std::int64_t(u / C), src_rows = std::max<std::int64_t>(1, choices);
    std::vector<std::int32_t> r(static_cast<std::size_t>(choices));
    for (std::int64_t i = 0; i < choices; ++i) r[std::size_t(i)] = i % 3 == 2 ? -1 : std::int32_t((i * 7) % src_rows);
    return r;
  };
  ops["gather_rows_weighted"] = linear_op("term", el, [&](double u) {
    const std::vector<std::int32_t> r = choice_rows(u);
    const std::vector<double> w(r.size(), 0.5);
    Tensor src = be->zeros(std::max<std::int64_t>(1, rows(u)), std::int64_t(C)), y = be->zeros(rows(u) / gk, std::int64_t(C));
    be->fill(src, 0.5f);
    return timed([&] { be->gather_rows_weighted(y, src, r, w, gk); });
  }, log, "gather_rows_weighted");
  ops["row_dots"] = linear_op("element", el, [&](double u) {
    const std::vector<std::int32_t> r = choice_rows(u);
    std::vector<std::int32_t> tok(r.size());
    for (std::size_t i = 0; i < tok.size(); ++i) tok[i] = std::int32_t(i / gk);
    Tensor a = be->zeros(std::max<std::int64_t>(1, rows(u) / gk), std::int64_t(C)),
           b = be->zeros(std::max<std::int64_t>(1, rows(u)), std::int64_t(C));
    be->fill(a, 0.5f);
    be->fill(b, 0.25f);
    return timed([&] { (void)be->row_dots(a, tok, b, r); });
  }, log, "row_dots");
  // Activation offload's copies as trainer/offload.cpp makes them: a tensor into a fresh host
  // vector, and a fresh tensor filled from one (a memcpy on the CPU backend, pageable cudaMemcpy
  // plus any bf16 conversion on a device backend); units = elements.
  ops["copy_to_host"] = linear_op("element", el, [&](double u) {
    Tensor t = be->zeros(rows(u), std::int64_t(C));
    be->fill(t, 0.5f);
    return timed([&] {
      std::vector<float> h(static_cast<std::size_t>(t.numel()));
      be->copy_to_host(h, t);
    });
  }, log, "copy_to_host");
  ops["copy_from_host"] = linear_op("element", el, [&](double u) {
    const std::vector<float> h(static_cast<std::size_t>(rows(u) * std::int64_t(C)), 0.5f);
    return timed([&] {
      Tensor t = be->zeros(rows(u), std::int64_t(C));
      be->copy_from_host(t, h);
    });
  }, log, "copy_from_host");
  // The loss over (rows, V) logits, V = 256.
  const double V = 256;
  const std::vector<double> lel = {8192, 32768, 131072, 262144};
  auto logits = [&](double u, const std::function<void(Tensor&, Tensor&, Tensor&, std::span<const std::int32_t>)>& f) {
    const std::int64_t r = std::int64_t(u / V);
    Tensor l = be->zeros(r, std::int64_t(V)), mx = be->zeros(r, 1), st = be->zeros(r, 2);
    be->fill(l, 0.01f);
    be->fill(st, 2.0f);
    return timed([&] { f(l, mx, st, std::span<const std::int32_t>(tokens.data(), std::size_t(r))); });
  };
  ops["logits_row_max"] = linear_op("element", lel, [&](double u) {
    return logits(u, [&](Tensor& l, Tensor& mx, Tensor&, std::span<const std::int32_t>) { be->logits_row_max(mx, l); });
  }, log, "logits_row_max");
  ops["logits_sum_exp_and_target"] = linear_op("element", lel, [&](double u) {
    return logits(u, [&](Tensor& l, Tensor& mx, Tensor& st, std::span<const std::int32_t> t) { be->logits_sum_exp_and_target(st, l, mx, t, 0); });
  }, log, "logits_sum_exp_and_target");
  ops["cross_entropy_backward"] = linear_op("element", lel, [&](double u) {
    Tensor d = be->zeros(std::int64_t(u / V), std::int64_t(V));
    return logits(u, [&](Tensor& l, Tensor& mx, Tensor& st, std::span<const std::int32_t> t) {
      be->cross_entropy_backward(d, l, mx, st, t, 0, 1.0f);
    });
  }, log, "cross_entropy_backward");

  // ---- Host copy bandwidth: a 64 MiB memcpy, read + write bytes counted.
  const std::size_t bytes = std::size_t(64) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double t = median_time([&] { std::memcpy(dst.data(), src.data(), bytes); }, 3);
  j["memory"] = {{"copy_GBps", 2.0 * double(bytes) / t / 1e9}};
  char line[96];
  std::snprintf(line, sizeof line, "  memcpy                     %8.2f GB/s (read + write)\n", 2.0 * double(bytes) / t / 1e9);
  log << line;
  track.finish();
  return pass;
}

/// Every sample of `j`, in the order measure_pass timed them.
std::vector<nlohmann::ordered_json*> samples_in_order(nlohmann::ordered_json& j) {
  std::vector<nlohmann::ordered_json*> v;
  for (auto& [name, op] : j["ops"].items())
    for (auto& smp : op["samples"]) v.push_back(&smp);
  return v;
}

/// Fits each linear op again from its samples and logs one line per op.
void refit_and_log(nlohmann::ordered_json& j, std::ostream& log) {
  for (auto& [name, op] : j["ops"].items()) {
    auto& samples = op["samples"];
    char line[160];
    if (op.contains("unit")) {
      std::vector<double> units, times;
      for (const auto& smp : samples) {
        units.push_back(smp["units"].get<double>());
        times.push_back(smp["time_s"].get<double>());
      }
      const LinearFitResult f = fit_linear(units, times);
      op["fixed_s"] = f.fixed_s;
      op["per_unit_s"] = f.per_unit_s;
      std::snprintf(line, sizeof line, "  %-26s %8.2f us + %7.3f ns/%s (largest residual %.1f%%)\n", name.c_str(),
                    f.fixed_s * 1e6, f.per_unit_s * 1e9, op["unit"].get<std::string>().c_str(), 100 * f.max_rel_residual);
    } else {
      double lo = 1e30, hi = 0;
      for (const auto& smp : samples) {
        const double r = 2 * smp["m"].get<double>() * smp["n"].get<double>() * smp["k"].get<double>() / smp["time_s"].get<double>();
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
      std::snprintf(line, sizeof line, "  %-26s %3zu shapes, %.2f - %.2f GFLOP/s\n", name.c_str(), samples.size(), lo / 1e9, hi / 1e9);
    }
    log << line;
  }
}

}  // namespace

nlohmann::ordered_json measure_backend(Backend& be, const std::function<void()>& sync, const CpuBenchOptions& o,
                                       std::ostream& log) {
  // Two passes some seconds apart, each sample the faster of the two: on a shared machine a short
  // burst of another tenant's work then spoils one pass of a sample, not the sample. A slow spell
  // can outlast both passes, though (on the CI VM a whole closed-loop calibration once came out 32%
  // slower than the trainer's steps measured minutes later, its probe readings before and after the
  // ops 21% apart; notes/status.md, session 54): so, with a host probe, every sample is also stated
  // at the host's quickest readings, by the probe's time around it.
  std::ostringstream pass_log;
  ProbeTrack first_track, second_track;
  first_track.probe = second_track.probe = o.host_probe;
  Pass first = measure_pass(be, sync, o, pass_log, first_track);
  Pass second;
  if (!o.quick) second = measure_pass(be, sync, o, pass_log, second_track);
  nlohmann::ordered_json& j = first.j;
  if (o.host_probe) {
    std::vector<double> all = first_track.readings;
    all.insert(all.end(), second_track.readings.begin(), second_track.readings.end());
    std::sort(all.begin(), all.end());
    const double reference = all[all.size() / 10];
    FORESIGHT_CHECK(reference > 0 && std::isfinite(reference)) << "host probe read " << reference << " s";
    double largest = 1.0;
    auto scale = [&](Pass& pass, const ProbeTrack& track) {
      const std::vector<nlohmann::ordered_json*> samples = samples_in_order(pass.j);
      FORESIGHT_CHECK(samples.size() == pass.timings.size()) << samples.size() << " samples, " << pass.timings.size() << " timed";
      for (std::size_t i = 0; i < samples.size(); ++i)
        (*samples[i])["time_s"] = settled_time(pass.timings[i], track.readings, reference, &largest);
    };
    scale(first, first_track);
    if (!o.quick) scale(second, second_track);
    j["host_probe"] = {{"reference_s", reference}, {"readings", all.size()}, {"largest_scale", largest}};
    char line[200];
    std::snprintf(line, sizeof line,
                  "  host probe during the ops: %zu readings, %.3f ms a call at the quickest tenth; samples timed "
                  "while it read slower scaled by up to 1/%.2f\n",
                  all.size(), reference * 1e3, largest);
    log << line;
  }
  if (!o.quick) {
    log << "  (second pass; each sample the faster of the two)\n";
    const std::vector<nlohmann::ordered_json*> a = samples_in_order(j), b = samples_in_order(second.j);
    for (std::size_t i = 0; i < a.size(); ++i)
      (*a[i])["time_s"] = std::min((*a[i])["time_s"].get<double>(), (*b[i])["time_s"].get<double>());
    j["memory"]["copy_GBps"] = std::max(j["memory"]["copy_GBps"].get<double>(), second.j["memory"]["copy_GBps"].get<double>());
  }
  refit_and_log(j, log);
  char line[96];
  std::snprintf(line, sizeof line, "  memcpy                     %8.2f GB/s (read + write)\n", j["memory"]["copy_GBps"].get<double>());
  log << line;
  return j;
}

nlohmann::ordered_json measure_cpu_backend(const CpuBenchOptions& o, std::ostream& log) {
  auto be = trainer::make_cpu_backend();
  CpuBenchOptions with_probe = o;
  // The median call, as the op samples are medians of short groups: under time-slicing by other
  // work a mean over a longer window reads slower than the samples do, and dividing by it made the
  // op times too quick (session 54: 2.7x on a loaded host). About 25 ms, some 5% of the timing.
  if (!with_probe.host_probe) with_probe.host_probe = [] { return probe_median_seconds(); };
  return measure_backend(*be, [] {}, with_probe, log);
}

}  // namespace foresight::calibrate
