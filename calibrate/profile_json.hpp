// The calibration profile `foresight calibrate` writes (DESIGN.md "Calibration profiles"): device
// facts, every measurement (median, spread, achieved rate) and the fitted compute-model parameters
// with their held-out errors. The layout is the one cost_models/profile.hpp parses: kernel "gemm"
// entries carry m, n, k (bf16, plain), "copy" entries bytes (read + written), "attention" entries
// flops (forward + backward, backward counted as 2.5 forwards); other kernels are extra records
// the cost models skip. CPU only.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/fit.hpp"
#include "calibrate/stats.hpp"

namespace foresight::calibrate {

struct DeviceFacts {
  std::string name;           // as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
  std::string spec;           // scenarios/gpus entry used for peaks, or "" when none matched
  double peak_tflops = 0;     // dense bf16 peak the efficiencies refer to
  double hbm_GBps = 0;        // DRAM peak the memory efficiency refers to
  int sms = 0;
  std::string compute_capability;
  double memory_GiB = 0, l2_MiB = 0;
  double clock_MHz = 0, memory_clock_MHz = 0;
  int driver_version = 0, runtime_version = 0;
  std::string nccl_version;   // "" without NCCL
  int gpus = 1;               // devices visible on this machine
};

/// One measured point: kernel name, its shape fields (m, n, k, bytes, flops, ranks, ...) and timing.
struct Measurement {
  std::string kernel;
  /// What ran it: "cublaslt" (GEMMs), "foresight-cuda-core" (kernels/attention.cu), "foresight"
  /// (kernels/ streaming kernels), "cuda-memcpy", "nccl". The cost model uses a GEMM or attention
  /// entry only for an execution that runs the same implementation (cost_models/profile.hpp).
  std::string impl;
  std::string dtype = "bf16";
  nlohmann::json shape = nlohmann::json::object();
  Summary timing{};
  double tflops = 0;  // achieved, when the kernel has a FLOP count
  double GBps = 0;    // achieved, when it has a byte count (collectives: bus bandwidth)
};

struct Profile {
  DeviceFacts device;
  std::string git_sha, created_utc, model;
  double wall_s = 0;
  std::vector<Measurement> measurements;
  std::vector<std::string> skipped;  // what was not measured and why ("nccl: one GPU ...")
  FitResult fit;                     // on every kernel sample
  HeldOutError held_out;             // of a fit on the other samples, on every 4th one
  HeldOutError held_out_profile;     // GEMMs: the profile's interpolation (what the cost model uses)
};

nlohmann::json to_json(const Profile& p);

}  // namespace foresight::calibrate
