// Kernel benchmarks against the targets, on the shapes they name: GEMMs of GPT-3 1.3B
// (4 sequences of 2048) and GPT-3 175B at TP=8 (one sequence), causal attention forward+backward
// (B4 H16 T2048 D128, bf16), and the memory-bound kernels next to a device-to-device copy of the
// same size. Timed by the calibration Harness; prints a table and writes JSON (argv[1], default
// bench_kernels.json) that scripts/gpu-test.sh sets beside PyTorch's numbers
// (calibrate/bench_torch.py). Without a GPU: says so and exits 1.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/harness.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device.hpp"
#include "kernels/kernels.hpp"

namespace k = foresight::kernels;
using foresight::calibrate::Harness;
using foresight::calibrate::HarnessOptions;

namespace {

// Random contents (bf16 in [-1, 1)), never zeros or a constant: those flatter the tensor cores.
struct Buf {
  void* p = nullptr;
  explicit Buf(std::size_t b) {
    FORESIGHT_CUDA(cudaMalloc(&p, b));
    foresight::calibrate::fill_random_bf16(p, b);
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

struct Row {
  std::string name, shape;
  double median_s, spread, rate;  // rate: TFLOP/s, or GB/s for memory-bound rows
  std::string unit;
};

int run(const std::string& out_path) {
  const auto c = k::device_count();
  if (c.count == 0) {
    std::fprintf(stderr, "bench_kernels: %s; nothing measured\n", c.reason.c_str());
    return 1;
  }
  const auto info = k::device_info(0);
  Harness H(HarnessOptions{.min_reps = 10, .max_reps = 50, .budget_s = 0.3});
  k::BlasContext blas;
  std::vector<Row> rows;

  struct G {
    const char* model;
    const char* op;
    int m, n, k;
  };
  // Linear forward shapes (tokens, out, in): Narayanan et al. 2021 sec. 3.2.
  const G gemms[] = {
      {"gpt3-1.3b", "qkv", 8192, 6144, 2048},     {"gpt3-1.3b", "proj", 8192, 2048, 2048},
      {"gpt3-1.3b", "fc1", 8192, 8192, 2048},     {"gpt3-1.3b", "fc2", 8192, 2048, 8192},
      {"gpt3-175b-tp8", "qkv", 2048, 4608, 12288}, {"gpt3-175b-tp8", "proj", 2048, 12288, 1536},
      {"gpt3-175b-tp8", "fc1", 2048, 6144, 12288}, {"gpt3-175b-tp8", "fc2", 2048, 12288, 6144},
  };
  for (const auto& g : gemms) {
    Buf A(std::size_t(g.m) * g.k * 2), B(std::size_t(g.n) * g.k * 2), C(std::size_t(g.m) * g.n * 2);
    const k::GemmDims d{.m = g.m, .n = g.n, .k = g.k, .trans_b = true};
    const auto s = H.time([&](cudaStream_t st) {
      k::gemm(blas, A.as<k::bf16>(), B.as<k::bf16>(), C.as<k::bf16>(), nullptr, d, k::Epilogue::none, 1, 0, st);
    });
    rows.push_back({std::string("gemm ") + g.model + " " + g.op,
                    std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k), s.median_s, s.spread(),
                    2.0 * g.m * g.n * g.k / s.median_s / 1e12, "TFLOP/s"});
  }
  for (const bool pipelined : {false, true}) {
    const k::AttentionShape a{.B = 4, .T = 2048, .H = 16, .D = 128, .pipelined = pipelined};
    const std::size_t n = std::size_t(a.B) * a.T * a.H * a.D;
    Buf q(n * 2), kk(n * 2), v(n * 2), o(n * 2), dout(n * 2), dq(n * 2), dk(n * 2), dv(n * 2), lse(n * 4),
        ws(k::attention_backward_workspace_bytes(a));
    const auto s = H.time([&](cudaStream_t st) {
      k::attention_forward(q.as<k::bf16>(), kk.as<k::bf16>(), v.as<k::bf16>(), o.as<k::bf16>(), lse.as<float>(), a, st);
      k::attention_backward(q.as<k::bf16>(), kk.as<k::bf16>(), v.as<k::bf16>(), o.as<k::bf16>(), dout.as<k::bf16>(),
                            lse.as<float>(), dq.as<k::bf16>(), dk.as<k::bf16>(), dv.as<k::bf16>(), ws.p, a, st);
    });
    // FlashAttention-2's convention: causal fwd 4 B H T^2 D / 2, fwd+bwd = 3.5x that.
    const double flops = 3.5 * 4.0 * a.B * a.H * double(a.T) * a.T * a.D / 2;
    rows.push_back({pipelined ? "attention fwd+bwd causal cp.async" : "attention fwd+bwd causal", "B4 H16 T2048 D128",
                    s.median_s, s.spread(), flops / s.median_s / 1e12, "TFLOP/s"});
  }
  {
    const long n = 1L << 27;  // 128 Mi elements: 256 MiB per bf16 tensor
    Buf x(n * 2), y(n * 2), z(n * 2), f1(n * 4), f2(n * 4), f3(n * 4), f4(n * 4), stats(n * 4 / 1024);
    foresight::calibrate::fill_random_f32(f1.p, n * 4);
    foresight::calibrate::fill_random_f32(f2.p, n * 4);
    foresight::calibrate::fill_random_f32(f3.p, n * 4);
    FORESIGHT_CUDA(cudaMemset(f4.p, 0, n * 4));  // AdamW's v (second moment) must start >= 0
    const int C = 4096;
    struct M {
      const char* name;
      double bytes;
      std::function<void(cudaStream_t)> run;
    };
    const M ms[] = {
        {"copy d2d", 4.0 * n, [&](cudaStream_t s) { k::copy_d2d(y.p, x.p, n * 2, s); }},
        {"gelu_forward", 4.0 * n, [&](cudaStream_t s) { k::gelu_forward(x.as<k::bf16>(), y.as<k::bf16>(), n, s); }},
        {"gelu_backward", 6.0 * n,
         [&](cudaStream_t s) { k::gelu_backward(x.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), n, s); }},
        {"residual_add", 6.0 * n,
         [&](cudaStream_t s) { k::residual_add(x.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), n, s); }},
        {"layernorm_forward", 4.0 * n,
         [&](cudaStream_t s) {
           k::layernorm_forward(x.as<k::bf16>(), y.as<k::bf16>(), y.as<k::bf16>(), z.as<k::bf16>(), stats.as<float>(),
                                stats.as<float>() + n / C, int(n / C), C, 1e-5f, s);
         }},
        {"layernorm_backward", 10.0 * n,
         [&](cudaStream_t s) {
           k::layernorm_backward(x.as<k::bf16>(), y.as<k::bf16>(), y.as<k::bf16>(), stats.as<float>(), stats.as<float>(),
                                 z.as<k::bf16>(), f1.as<float>(), f2.as<float>(), int(n / C), C, s);
         }},
        {"adamw (30 B/param)", 30.0 * (n / 2),
         [&](cudaStream_t s) {
           k::adamw(f1.as<float>(), f2.as<float>(), f3.as<float>(), f4.as<float>(), z.as<k::bf16>(), n / 2,
                    k::AdamWConfig{}, 1, s);
         }},
    };
    for (const auto& m : ms) {
      const auto s = H.time(m.run);
      rows.push_back({m.name, "256 MiB bf16", s.median_s, s.spread(), m.bytes / s.median_s / 1e9, "GB/s"});
    }
  }

  nlohmann::json j;
  j["device"] = info.name;
  double copy_GBps = 0;
  for (const auto& r : rows)
    if (r.name == "copy d2d") copy_GBps = r.rate;
  std::printf("\nForesight kernels on %s\n%-34s %-20s %12s %8s %14s %10s\n", info.name.c_str(), "kernel", "shape",
              "median (us)", "spread", "rate", "vs copy");
  for (const auto& r : rows) {
    const bool mem = r.unit == "GB/s";
    std::printf("%-34s %-20s %12.1f %7.1f%% %9.1f %-7s %9s\n", r.name.c_str(), r.shape.c_str(), r.median_s * 1e6,
                100 * r.spread, r.rate, r.unit.c_str(),
                mem && copy_GBps > 0 ? (std::to_string(int(100 * r.rate / copy_GBps + 0.5)) + "%").c_str() : "");
    j["rows"].push_back({{"name", r.name}, {"shape", r.shape}, {"median_s", r.median_s}, {"spread", r.spread},
                         {"rate", r.rate}, {"unit", r.unit}});
  }
  std::ofstream(out_path) << j.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? argv[1] : "bench_kernels.json");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}
