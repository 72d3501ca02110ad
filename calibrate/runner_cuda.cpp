// The GPU side of `foresight calibrate`: sweeps over GEMMs, attention, the memory-bound kernels,
// device and pinned host copies, and NCCL collectives, all timed by the one Harness; then the fit.
// Achieved rates use the cost model's own FLOP and byte counts (fit.cpp features).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "calibrate/calibrate.hpp"
#include "calibrate/harness.hpp"
#include "calibrate/nccl_sweep.hpp"
#include "calibrate/refit.hpp"
#include "core/error.hpp"
#include "core/scenario.hpp"
#include "cost_models/profile.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device.hpp"
#include "kernels/kernels.hpp"

namespace foresight::calibrate {

namespace k = kernels;

namespace {

// A device buffer that frees itself.
struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t bytes) { FORESIGHT_CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 16))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Launches of a measured call, from the table the refit reads too (calibrate/refit.hpp).
int launches_of(const char* kernel) {
  const MeasuredKernel* k = find_measured_kernel(kernel);
  FORESIGHT_CHECK(k != nullptr) << kernel << " is missing from calibrate::measured_kernels()";
  return k->launches;
}

// The scenarios/gpus entry for a driver-reported name, or "" (then the peaks come from the run).
std::string spec_for(const k::DeviceInfo& d) {
  const std::string& n = d.name;
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  const double gib = d.memory_bytes / 1073741824.0;
  if (has("H100") && !has("PCIe")) return "h100-sxm";
  if (has("H200")) return "h200-sxm";
  if (has("A100") && !has("PCIe")) return gib > 60 ? "a100-sxm4-80gb" : "a100-sxm4-40gb";
  if (has("V100") && !has("PCIe")) return gib > 20 ? "v100-sxm2-32gb" : "v100-sxm2-16gb";
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

struct Runner {
  const CalibrateOptions& opt;
  const ProgressFn& progress;
  Profile& prof;
  GpuSpec gpu;
  Harness H;
  k::BlasContext blas;
  std::vector<KernelSample> samples;

  void add(Measurement m, std::optional<KernelSample> s) {
    if (s) {
      s->time_s = m.timing.median_s;
      samples.push_back(*s);
    }
    prof.measurements.push_back(std::move(m));
  }

  void gemms() {
    std::set<std::tuple<double, double, double>> seen;
    std::vector<cost_models::GemmShape> shapes;
    for (const auto& m : opt.models)
      for (const auto& s : planner_gemm_shapes(m))
        if (seen.insert({s.m, s.n, s.k}).second) shapes.push_back(s);
    for (const auto& s : generic_gemm_grid(opt.quick))
      if (seen.insert({s.m, s.n, s.k}).second) shapes.push_back(s);
    double a = 0, b = 0, c = 0;
    for (const auto& s : shapes) {
      a = std::max(a, s.m * s.k);
      b = std::max(b, s.k * s.n);
      c = std::max(c, s.m * s.n);
    }
    Dev A(std::size_t(a) * 2), B(std::size_t(b) * 2), C(std::size_t(c) * 2), bias(1 << 20);
    fill_random_bf16(A.p, std::size_t(a) * 2);
    fill_random_bf16(B.p, std::size_t(b) * 2);
    fill_random_bf16(bias.p, 1 << 20);
    int done = 0;
    for (const auto& s : shapes) {
      if (progress) progress("gemm", done++, int(shapes.size()));
      // A Linear layer's forward as PyTorch and Megatron store it: x (m, k) times W (n, k)^T. The
      // bundled trainer stores W as (k, n) (an nn product through the same kernels::gemm); the
      // sweep keeps PyTorch's layout so that its figures compare with PyTorch's GEMMs.
      const k::GemmDims d{.m = int(s.m), .n = int(s.n), .k = int(s.k), .trans_b = true};
      Measurement m{.kernel = "gemm", .impl = "cublaslt", .shape = {{"m", s.m}, {"n", s.n}, {"k", s.k}, {"trans_b", true}}};
      m.timing = H.time([&](cudaStream_t st) {
        k::gemm(blas, A.as<k::bf16>(), B.as<k::bf16>(), C.as<k::bf16>(), nullptr, d, k::Epilogue::none, 1, 0, st);
      });
      m.tflops = 2 * s.m * s.n * s.k / m.timing.median_s / 1e12;
      add(m, KernelSample{.name = "gemm", .kind = SampleKind::gemm, .gemm = s});
      if (s.n * 2 <= (1 << 20) && s.k >= 1024 && s.m >= 1024 && done % 4 == 0) {  // fused epilogue, a subset
        Measurement e{.kernel = "gemm_bias_gelu", .impl = "cublaslt", .shape = m.shape};
        e.timing = H.time([&](cudaStream_t st) {
          k::gemm(blas, A.as<k::bf16>(), B.as<k::bf16>(), C.as<k::bf16>(), bias.as<k::bf16>(), d,
                  k::Epilogue::bias_gelu, 1, 0, st);
        });
        e.tflops = 2 * s.m * s.n * s.k / e.timing.median_s / 1e12;
        add(e, std::nullopt);
      }
    }
  }

  // Burst against sustained: each point of the sweep above is timed for ~0.2 s of GPU time, a
  // burst at whatever clock the GPU boosts to; a training step keeps the tensor cores busy for
  // minutes at the power limit, where the clock settles lower (ml-engineering's MAMF against MSMF:
  // 0.849 on H200, 0.840 on B200; reports/simulator.md "Sensitivity"). One large GEMM is timed
  // cold, then again after a soak of back-to-back launches; both go into the profile
  // ("gemm_burst", "gemm_sustained") so that their ratio, measured here, can become a sourced
  // parameter of the compute model instead of one borrowed from other GPUs.
  void gemm_sustained() {
    const int n = 8192;
    const double soak_s = opt.quick ? 5.0 : 30.0;
    const std::size_t bytes = std::size_t(n) * n * 2;
    Dev A(bytes), B(bytes), C(bytes);
    fill_random_bf16(A.p, bytes);
    fill_random_bf16(B.p, bytes);
    const k::GemmDims d{.m = n, .n = n, .k = n, .trans_b = true};
    auto launch = [&](cudaStream_t st) {
      k::gemm(blas, A.as<k::bf16>(), B.as<k::bf16>(), C.as<k::bf16>(), nullptr, d, k::Epilogue::none, 1, 0, st);
    };
    const nlohmann::json shape = {{"m", n}, {"n", n}, {"k", n}, {"trans_b", true}, {"soak_s", soak_s}};
    const double flops = 2.0 * n * n * double(n);
    // Let the GPU idle briefly first, so that the burst starts from the boost clock.
    FORESIGHT_CUDA(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Measurement burst{.kernel = "gemm_burst", .impl = "cublaslt", .shape = shape};
    burst.timing = H.time(launch);
    burst.tflops = flops / burst.timing.median_s / 1e12;
    if (progress) progress("gemm soak", 0, 1);
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < soak_s) {
      for (int i = 0; i < 20; ++i) launch(H.stream());
      FORESIGHT_CUDA(cudaStreamSynchronize(H.stream()));
    }
    Measurement sustained{.kernel = "gemm_sustained", .impl = "cublaslt", .shape = shape};
    sustained.timing = H.time(launch);
    sustained.tflops = flops / sustained.timing.median_s / 1e12;
    if (progress) progress("gemm soak", 1, 1);
    add(std::move(burst), std::nullopt);
    add(std::move(sustained), std::nullopt);
  }

  void attention() {
    struct Shape {
      int B, H, T, D;
    };
    std::vector<Shape> shapes;
    for (const auto& m : opt.models)
      for (int tp : {1, 8})
        if (m.heads % tp == 0 && (m.head_dim() == 32 || m.head_dim() == 64 || m.head_dim() == 128))
          shapes.push_back({1, m.heads / tp, m.seq_len, m.head_dim()});
    for (int T : opt.quick ? std::vector<int>{1024, 2048} : std::vector<int>{512, 1024, 2048, 4096})
      shapes.push_back({4, 16, T, 128});
    std::size_t most = 0;
    for (const auto& s : shapes) most = std::max(most, std::size_t(s.B) * s.H * s.T * s.D);
    Dev q(most * 2), kk(most * 2), v(most * 2), o(most * 2), dout(most * 2), dq(most * 2), dk(most * 2), dv(most * 2);
    Dev lse(most * 4), ws(most * 4);
    for (auto* d : {&q, &kk, &v, &dout}) fill_random_bf16(d->p, most * 2);
    int done = 0;
    for (const auto& s : shapes) {
      if (progress) progress("attention", done++, int(shapes.size()));
      const k::AttentionShape a{.B = s.B, .T = s.T, .H = s.H, .D = s.D};
      const double bh = double(s.B) * s.H;
      // Causal forward FLOPs as flash_forward counts them: 4 bh d (T^2 - T(T-1)/2).
      const double fwd_flops = 4.0 * bh * s.D * (double(s.T) * s.T - double(s.T) * (s.T - 1) / 2.0);
      const nlohmann::json shape = {{"B", s.B}, {"H", s.H}, {"T", s.T}, {"D", s.D}, {"causal", true}};
      auto fwd = [&](cudaStream_t st) {
        k::attention_forward(q.as<k::bf16>(), kk.as<k::bf16>(), v.as<k::bf16>(), o.as<k::bf16>(), lse.as<float>(), a, st);
      };
      Measurement f{.kernel = "attention_fwd", .impl = "foresight-cuda-core", .shape = shape};
      f.shape["flops"] = fwd_flops;
      f.timing = H.time(fwd);
      f.tflops = fwd_flops / f.timing.median_s / 1e12;
      add(f, KernelSample{.name = "attention_fwd", .kind = SampleKind::attention, .launches = launches_of("attention_fwd"), .batch_heads = bh,
                          .tokens = double(s.T), .context = double(s.T), .head_dim = double(s.D), .passes = 1});
      Measurement fb{.kernel = "attention", .impl = "foresight-cuda-core", .shape = shape};
      fb.shape["flops"] = 3.5 * fwd_flops;  // backward = 2.5 forwards (roofline.hpp flash_efficiency)
      fb.shape["passes"] = "forward+backward";
      fb.timing = H.time([&](cudaStream_t st) {
        fwd(st);
        k::attention_backward(q.as<k::bf16>(), kk.as<k::bf16>(), v.as<k::bf16>(), o.as<k::bf16>(), dout.as<k::bf16>(),
                              lse.as<float>(), dq.as<k::bf16>(), dk.as<k::bf16>(), dv.as<k::bf16>(), ws.p, a, st);
      });
      fb.tflops = 3.5 * fwd_flops / fb.timing.median_s / 1e12;
      add(fb, KernelSample{.name = "attention", .kind = SampleKind::attention, .launches = launches_of("attention"), .batch_heads = bh,
                           .tokens = double(s.T), .context = double(s.T), .head_dim = double(s.D), .passes = 3.5});
    }
  }

  // Streaming kernels over 2^16 .. 2^28 elements; bytes = what each must read and write.
  void memory_bound() {
    const long max_n = opt.quick ? (1L << 26) : (1L << 28);
    std::vector<long> sizes;
    for (long n = 1L << 16; n <= max_n; n <<= (opt.quick ? 4 : 2)) sizes.push_back(n);
    Dev x(max_n * 2), y(max_n * 2), z(max_n * 2), f32a(max_n * 4), f32b(max_n * 4), f32c(max_n * 4), f32d(max_n * 4);
    Dev stats(max_n * 4), tok(max_n * 4);
    fill_random_bf16(x.p, max_n * 2);
    fill_random_bf16(y.p, max_n * 2);
    fill_random_f32(f32a.p, max_n * 4);
    fill_random_f32(f32b.p, max_n * 4);
    fill_random_f32(f32c.p, max_n * 4);
    FORESIGHT_CUDA(cudaMemset(f32d.p, 0, max_n * 4));  // AdamW's v (second moment) must start >= 0
    FORESIGHT_CUDA(cudaMemset(tok.p, 0, max_n * 4));
    const int C = 4096;  // row width for layernorm (a hidden size); vocab 51200 rows for cross-entropy
    const int V = 51200;
    struct Op {
      const char* name;
      double bytes_per_elem;
      std::function<void(long, cudaStream_t)> run;
    };
    const std::vector<Op> ops = {
        {"copy", 4, [&](long n, cudaStream_t s) { k::copy_d2d(y.p, x.p, n * 2, s); }},
        {"gelu_forward", 4, [&](long n, cudaStream_t s) { k::gelu_forward(x.as<k::bf16>(), y.as<k::bf16>(), n, s); }},
        {"gelu_backward", 6,
         [&](long n, cudaStream_t s) { k::gelu_backward(x.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), n, s); }},
        {"residual_add", 6,
         [&](long n, cudaStream_t s) { k::residual_add(x.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), n, s); }},
        {"layernorm_forward", 4,
         [&](long n, cudaStream_t s) {
           k::layernorm_forward(x.as<k::bf16>(), y.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), stats.as<float>(),
                                stats.as<float>() + n / C, int(n / C), C, 1e-5f, s);
         }},
        // dx pass reads dy, x and writes dx; the parameter pass reads dy, x again.
        {"layernorm_backward", 10,
         [&](long n, cudaStream_t s) {
           k::layernorm_backward(x.as<k::bf16>(), y.as<k::bf16>(), y.as<k::bf16>(), stats.as<float>(),
                                 stats.as<float>(), z.as<k::bf16>(), f32a.as<float>(), f32b.as<float>(), int(n / C), C, s);
         }},
        {"softmax_cross_entropy", 4,
         [&](long n, cudaStream_t s) {
           k::softmax_cross_entropy(x.as<k::bf16>(), tok.as<std::int32_t>(), f32a.as<float>(), z.as<k::bf16>(),
                                    int(n / V), V, 1.0f, s);
         }},
        // 30 bytes per parameter, cost_models::optimizer_time.
        {"adamw", 30,
         [&](long n, cudaStream_t s) {
           k::adamw(f32a.as<float>(), f32b.as<float>(), f32c.as<float>(), f32d.as<float>(), z.as<k::bf16>(), n,
                    k::AdamWConfig{}, 1, s);
         }},
    };
    int done = 0;
    const int total = int(ops.size() * sizes.size());
    for (const auto& op : ops)
      for (long n : sizes) {
        if (progress) progress("memory-bound kernels", done++, total);
        if ((std::string(op.name).starts_with("layernorm") && n / C < 1) ||
            (std::string(op.name) == "softmax_cross_entropy" && n / V < 1))
          continue;
        const long elems = std::string(op.name).starts_with("layernorm") ? (n / C) * C
                           : std::string(op.name) == "softmax_cross_entropy" ? (n / V) * V
                                                                             : n;
        const double bytes = op.bytes_per_elem * double(elems);
        const int launches = launches_of(op.name);
        Measurement m{.kernel = op.name,
                      .impl = "foresight",
                      .shape = {{"elements", double(elems)}, {"bytes", bytes}, {"launches", launches}}};
        m.timing = H.time([&](cudaStream_t s) { op.run(elems, s); });
        m.GBps = bytes / m.timing.median_s / 1e9;
        add(m, KernelSample{.name = op.name, .kind = SampleKind::memory, .bytes = bytes, .launches = launches});
      }
  }

  void host_copies() {
    const std::size_t max_b = opt.quick ? (std::size_t(256) << 20) : (std::size_t(1) << 30);
    void* h = k::pinned_alloc(max_b);
    Dev d(max_b);
    std::memset(h, 1, max_b);
    int done = 0;
    std::vector<std::size_t> sizes;
    for (std::size_t b = 4096; b <= max_b; b *= 4) sizes.push_back(b);
    for (const char* dir : {"h2d", "d2h"})
      for (std::size_t b : sizes) {
        if (progress) progress("pinned host copies", done++, int(2 * sizes.size()));
        Measurement m{.kernel = dir, .impl = "cuda-memcpy", .dtype = "bytes", .shape = {{"bytes", double(b)}, {"pinned", true}}};
        m.timing = H.time([&](cudaStream_t s) {
          if (dir[0] == 'h') k::copy_h2d(d.p, h, b, s);
          else k::copy_d2h(h, d.p, b, s);
        });
        m.GBps = double(b) / m.timing.median_s / 1e9;
        add(m, std::nullopt);
      }
    k::pinned_free(h);
  }
};

}  // namespace

std::string no_device_reason() { return k::device_count().reason; }

Profile run_calibration(const CalibrateOptions& opt, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto count = k::device_count();
  if (count.count == 0) throw NoDevice(count.reason);
  FORESIGHT_CUDA(cudaSetDevice(0));
  const auto info = k::device_info(0);
  Profile prof;
  auto& dev = prof.device;
  dev.name = info.name;
  dev.sms = info.sms;
  dev.compute_capability = std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor);
  dev.memory_GiB = info.memory_bytes / 1073741824.0;
  dev.l2_MiB = info.l2_bytes / 1048576.0;
  dev.clock_MHz = info.clock_MHz;
  dev.memory_clock_MHz = info.memory_clock_MHz;
  dev.driver_version = info.driver_version;
  dev.runtime_version = info.runtime_version;
  dev.gpus = count.count;
  dev.spec = spec_for(info);
  prof.git_sha = opt.git_sha;
  prof.created_utc = utc_now();
  for (const auto& m : opt.models) prof.model += (prof.model.empty() ? "" : ",") + m.name;

  GpuSpec gpu;
  if (!dev.spec.empty()) {
    gpu = load_gpu(resolve_scenario("gpus", dev.spec));
  } else {
    // Unknown GPU: the reported SMs and DRAM clock; the peak is set from the GEMMs below.
    gpu.name = info.name;
    gpu.sms = info.sms;
    gpu.clock_MHz = info.clock_MHz;
    gpu.hbm_bandwidth = BytesPerSecond(info.dram_peak_Bps());
    gpu.peak_bf16 = gpu.peak_fp16 = FlopsPerSecond(1e15);  // placeholder until measured
    prof.skipped.push_back("device spec: '" + info.name + "' matches no scenarios/gpus entry; peak taken as the best GEMM / 0.8");
  }

  Runner r{opt, progress, prof, gpu, Harness(HarnessOptions{.budget_s = opt.budget_s_per_point}), k::BlasContext(), {}};
  r.gemms();
  r.gemm_sustained();
  double best_tflops = 0;
  for (const auto& m : prof.measurements)
    if (m.kernel == "gemm") best_tflops = std::max(best_tflops, m.tflops);
  if (dev.spec.empty()) gpu.peak_bf16 = gpu.peak_fp16 = FlopsPerSecond(best_tflops / 0.8 * 1e12);
  r.gpu = gpu;
  dev.peak_tflops = std::max(gpu.peak_bf16.value() / 1e12, best_tflops);  // the parser refuses GEMMs above peak
  dev.hbm_GBps = gpu.hbm_bandwidth.value() / 1e9;
  r.attention();
  r.memory_bound();
  r.host_copies();
  auto coll = nccl_sweep(count.count, opt.quick, progress, prof.skipped, dev.nccl_version);
  for (auto& m : coll) prof.measurements.push_back(std::move(m));

  fit_into(prof, r.gpu, r.samples);
  prof.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return prof;
}

}  // namespace foresight::calibrate
