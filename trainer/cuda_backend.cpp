#include "trainer/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "kernels/cublas_check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device.hpp"
#include "kernels/kernels.hpp"
#include "trainer/cuda_backend_kernels.hpp"
#include "trainer/op_profile.hpp"
#include "trainer/precision.hpp"

namespace foresight::trainer {

namespace {

/// A caching allocator in the manner of PyTorch's: freed blocks are kept by size and handed out
/// again, because a training step allocates the same activation shapes every micro-batch and
/// cudaMalloc/cudaFree synchronise the device. Every kernel runs on the backend's one stream, so a
/// block freed while kernels that use it are still queued is safe to reuse on that stream. Sizes
/// are in bytes (a packed bf16 tensor asks for 2 per element).
class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool() {
    cudaSetDevice(device_);
    release_cached();
  }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  /// Rounded size of a request (2 KiB granules), the key blocks are kept under.
  static std::size_t rounded(std::size_t bytes) { return std::max<std::size_t>(2048, (bytes + 2047) / 2048 * 2048); }

  /// A block of at least `bytes`; `logical_bytes` is what the usage counts (0 for scratch).
  void* get(std::size_t bytes, std::size_t logical_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    FORESIGHT_CUDA(cudaSetDevice(device_));  // blocks belong to this backend's GPU, whatever is current
    const std::size_t r = rounded(bytes);
    void* p = nullptr;
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      if (cudaMalloc(&p, r) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error state of a failed allocation
        release_cached();
        if (cudaMalloc(&p, r) != cudaSuccess) {
          cudaGetLastError();
          std::ostringstream os;
          os << "out of GPU memory: " << r << " bytes asked, " << in_use_ << " bytes in use by "
             << "the trainer's tensors";
          throw kernels::CudaError(os.str());
        }
      }
    }
    in_use_ += std::int64_t(logical_bytes);
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void put(void* p, std::size_t bytes, std::size_t logical_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[rounded(bytes)].push_back(p);
    in_use_ -= std::int64_t(logical_bytes);
  }
  std::int64_t in_use() const { return in_use_; }
  std::int64_t peak() const { return peak_; }

 private:
  void release_cached() {
    for (auto& [n, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
    free_.clear();
  }
  int device_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::int64_t in_use_ = 0, peak_ = 0;
};

/// A tensor's device memory: 4 bytes per element for fp32, 2 for bf16 (packed, counted as 2 in
/// bytes_in_use(): the memory a bf16 recipe saves is real here).
struct DeviceBuffer : Buffer {
  std::shared_ptr<DevicePool> pool;
  DeviceBuffer(std::shared_ptr<DevicePool> p, std::size_t n, ElementType t) : pool(std::move(p)) {
    elements = n;
    device = Device::cuda;
    type = t;
    storage = t == ElementType::bf16 ? Storage::packed_bf16 : Storage::float32;
    raw = pool->get(bytes(), bytes());
  }
  ~DeviceBuffer() override { pool->put(raw, bytes(), bytes()); }
  std::size_t bytes() const { return elements * storage_bytes(storage); }
};

/// Scratch memory for one call (token ids, partial sums, converted operands), returned to the
/// pool on scope exit.
class Scratch {
 public:
  Scratch(std::shared_ptr<DevicePool> pool, std::size_t bytes) : pool_(std::move(pool)), bytes_(bytes) {
    p_ = pool_->get(bytes_, 0);
  }
  ~Scratch() {
    if (p_) pool_->put(p_, bytes_, 0);
  }
  Scratch(Scratch&& o) noexcept : pool_(std::move(o.pool_)), bytes_(o.bytes_), p_(o.p_) { o.p_ = nullptr; }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch& operator=(Scratch&&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  std::shared_ptr<DevicePool> pool_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

void check_device(const Tensor& t, const char* op) {
  FORESIGHT_CHECK(t.defined() && t.device() == Device::cuda) << op << ": a tensor that is not on the GPU";
}

cuda::Type type_of(const Tensor& t) {
  return t.storage() == Storage::packed_bf16 ? cuda::Type::bf16 : cuda::Type::fp32;
}
/// A tensor's elements for a kernel to read, or to write, `elements` past its first.
cuda::In in(const Tensor& t, std::int64_t elements = 0) {
  return {static_cast<const std::byte*>(t.raw()) + elements * std::int64_t(t.element_bytes()), type_of(t)};
}
cuda::Out out(const Tensor& t, std::int64_t elements = 0) {
  return {static_cast<std::byte*>(t.raw()) + elements * std::int64_t(t.element_bytes()), type_of(t)};
}
/// The device floats of a tensor the recipe keeps in fp32 (statistics, master weights, moments).
float* fp32(const Tensor& t, const char* op, const char* what) {
  FORESIGHT_CHECK(t.storage() == Storage::float32) << op << ": " << what << " must be an fp32 tensor (zeros_fp32)";
  return t.data();
}
cudaDataType_t cublas_type(cuda::Type t) { return t == cuda::Type::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

/// FORESIGHT_PROFILE_OPS=1: every backend call is bracketed by two CUDA events on the backend's
/// stream, and the destructor prints each op's GPU time (sum over calls, count, share) to stderr,
/// largest first: the device time between the events, without synchronising the stream in the
/// step (the events are read once, at the end). Gaps between ops (host time, launch latency) are
/// what the step takes beyond the ops' sum.
class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler() {
    for (auto& [name, evs] : events_)
      for (auto& [a, b] : evs) {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      }
  }
  std::pair<cudaEvent_t, cudaEvent_t> begin(const std::string& name) {
    cudaEvent_t a = nullptr, b = nullptr;
    FORESIGHT_CUDA(cudaEventCreate(&a));
    FORESIGHT_CUDA(cudaEventCreate(&b));
    FORESIGHT_CUDA(cudaEventRecord(a, stream_));
    events_[name].push_back({a, b});
    return {a, b};
  }
  void end(cudaEvent_t b) { cudaEventRecord(b, stream_); }
  /// Per op: calls, the median time of one call and calls x median, largest first
  /// (print_op_profile). The median keeps one-time costs out (the first GEMM's cuBLAS set-up and
  /// lazy module loading, the first step's allocations, a host-to-device copy waiting for the queue
  /// to drain), which the plain sum, also printed, includes.
  void report() {
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return;
    OpTimesMs times;
    for (auto& [name, evs] : events_) {
      std::vector<double>& t = times[name];
      for (auto& [a, b] : evs) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) t.push_back(ms);
      }
    }
    print_op_profile(stderr, "GPU", times);
  }

 private:
  cudaStream_t stream_;
  std::map<std::string, std::vector<std::pair<cudaEvent_t, cudaEvent_t>>> events_;
};

/// Records the end event of one profiled op when it leaves scope (nothing when profiling is off).
class OpScope {
 public:
  OpScope() = default;
  OpScope(OpProfiler* p, cudaEvent_t end) : p_(p), end_(end) {}
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  OpScope(OpScope&& o) noexcept : p_(o.p_), end_(o.end_) { o.p_ = nullptr; }
  OpScope& operator=(OpScope&&) = delete;
  ~OpScope() {
    if (p_) p_->end(end_);
  }

 private:
  OpProfiler* p_ = nullptr;
  cudaEvent_t end_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool tf32, Precision precision) : device_(device), tf32_(tf32), precision_(precision) {
    FORESIGHT_CUDA(cudaSetDevice(device_));
    FORESIGHT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FORESIGHT_CUBLAS(cublasCreate(&blas_));
    FORESIGHT_CUBLAS(cublasSetStream(blas_, stream_));
    // bf16 GEMMs: tensor cores (bf16 products are exact in fp32), fp32 accumulation throughout,
    // split-K partial sums included. fp32 GEMMs: strict fp32, or TF32 tensor cores when asked.
    const cublasMath_t mode = bf16()  ? cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
                              : tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                     : CUBLAS_PEDANTIC_MATH;
    FORESIGHT_CUBLAS(cublasSetMathMode(blas_, mode));
    pool_ = std::make_shared<DevicePool>(device_);
    if (const char* e = std::getenv("FORESIGHT_ATTENTION")) {
      const std::string v = e;
      if (v != "fused" && v != "pipelined" && v != "unfused")
        throw SpecError(SourceLocation{"environment", 0, 0}, "FORESIGHT_ATTENTION", v,
                        "must be fused (the default), pipelined (its cp.async form) or unfused");
      unfused_attention_ = v == "unfused";
      pipelined_attention_ = v == "pipelined";
    }
    if (op_profiling_requested()) profiler_ = std::make_unique<OpProfiler>(stream_);
    if (const char* e = std::getenv("FORESIGHT_GEMM_EPILOGUE")) {
      const std::string v = e;
      if (v != "gelu" && v != "bias" && v != "none")
        throw SpecError(SourceLocation{"environment", 0, 0}, "FORESIGHT_GEMM_EPILOGUE", v,
                        "must be gelu (the default: a Linear layer's bias, and FC1's GeLU and its backward, in "
                        "cuBLASLt's epilogues), bias (the bias only) or none (separate kernels)");
      bias_epilogue_ = v != "none";
      gelu_epilogue_ = v == "gelu";
    }
    if (const char* e = std::getenv("FORESIGHT_GEMM")) {
      const std::string v = e;
      if (v != "lt" && v != "cublas")
        throw SpecError(SourceLocation{"environment", 0, 0}, "FORESIGHT_GEMM", v,
                        "must be lt (the default: bf16 GEMMs through kernels::gemm, cuBLASLt, the GEMM `foresight "
                        "calibrate` measures) or cublas (cublasGemmEx)");
      lt_gemm_ = v == "lt";
    }
    if (bf16() && (bias_epilogue_ || gelu_epilogue_ || lt_gemm_)) {
      // The workspace is pool scratch: like every scratch buffer it is outside the live-tensor
      // figures (bytes_in_use, peak_bytes), though it is device memory all the same (32 MiB).
      lt_workspace_ = std::make_unique<Scratch>(pool_, kLtWorkspaceBytes);
      lt_.emplace(lt_workspace_->as<void>(), kLtWorkspaceBytes);
    }
  }
  ~CudaBackend() override {
    if (profiler_) profiler_->report();
    profiler_.reset();
    cudaStreamSynchronize(stream_);
    lt_.reset();
    lt_workspace_.reset();
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return tf32_ ? "cuda-tf32" : "cuda"; }
  std::string compute_dtype() const override { return bf16() ? "bf16" : tf32_ ? "tf32" : "fp32"; }
  Precision precision() const override { return precision_; }
  Device device() const override { return Device::cuda; }
  void* stream() const override { return stream_; }

  Tensor zeros(std::int64_t rows, std::int64_t cols) override { return make(rows, cols, activation_type(precision_)); }
  Tensor zeros_fp32(std::int64_t rows, std::int64_t cols) override { return make(rows, cols, ElementType::fp32); }
  void copy_from_host(Tensor dst, std::span<const float> src) override {
    const OpScope op_scope = profile("copy_from_host");
    check_device(dst, "copy_from_host");
    FORESIGHT_CHECK(std::int64_t(src.size()) == dst.numel()) << src.size() << " vs " << dst.numel();
    if (src.empty()) return;
    if (dst.storage() == Storage::packed_bf16) {
      // Rounded on the host (kernels::to_bf16, the rounding of __float2bfloat16_rn), 2 bytes each.
      std::vector<kernels::bf16> packed(src.size());
      pack_bf16(src.data(), packed.data(), src.size());
      FORESIGHT_CUDA(cudaMemcpyAsync(dst.raw(), packed.data(), dst.bytes(), cudaMemcpyHostToDevice, stream_));
      FORESIGHT_CUDA(cudaStreamSynchronize(stream_));  // `packed` goes away when we return
      return;
    }
    FORESIGHT_CUDA(cudaMemcpyAsync(dst.raw(), src.data(), dst.bytes(), cudaMemcpyHostToDevice, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));  // the span may go away when we return
  }
  void copy_to_host(std::span<float> dst, const Tensor& src) override {
    const OpScope op_scope = profile("copy_to_host");
    check_device(src, "copy_to_host");
    FORESIGHT_CHECK(std::int64_t(dst.size()) == src.numel()) << dst.size() << " vs " << src.numel();
    if (dst.empty()) return;
    if (src.storage() == Storage::packed_bf16) {
      std::vector<kernels::bf16> packed(dst.size());
      FORESIGHT_CUDA(cudaMemcpyAsync(packed.data(), src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream_));
      FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
      unpack_bf16(packed.data(), dst.data(), dst.size());  // exact: every bf16 is a float
      return;
    }
    FORESIGHT_CUDA(cudaMemcpyAsync(dst.data(), src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
  }
  void fill(Tensor t, float value) override {
    const OpScope op_scope = profile("fill");
    check_device(t, "fill");
    cuda::fill(out(t), t.numel(), value, stream_);
  }
  std::int64_t bytes_in_use() const override { return pool_->in_use(); }
  std::int64_t peak_bytes() const override { return pool_->peak(); }

  void copy(Tensor dst, const Tensor& src) override {
    const OpScope op_scope = profile("copy");
    check_same_shape(dst, src, "copy");
    if (src.numel() == 0) return;
    if (dst.storage() == src.storage())
      FORESIGHT_CUDA(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, stream_));
    else  // e.g. the fp32 master weights into the bf16 working copy, rounded
      cuda::convert(out(dst), in(src), src.numel(), stream_);
  }
  void add(Tensor y, const Tensor& x) override {
    const OpScope op_scope = profile("add");
    check_same_shape(y, x, "add");
    cuda::add(out(y), in(x), y.numel(), stream_);
  }
  double sum_squares(const Tensor& x) override {
    const OpScope op_scope = profile("sum_squares");
    Scratch s(pool_, sizeof(double) * (cuda::kSumBlocks + 1));
    double* partial = s.as<double>();
    cuda::sum_squares(in(x), x.numel(), partial, partial + cuda::kSumBlocks, stream_);
    double r = 0;
    FORESIGHT_CUDA(cudaMemcpyAsync(&r, partial + cuda::kSumBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return r;
  }
  std::vector<double> sum_squares_many(std::span<const Tensor> xs) override {
    const OpScope op_scope = profile("sum_squares_many");
    std::vector<double> r(xs.size(), 0.0);
    if (xs.empty()) return r;
    // Each tensor's partial sums and result in its own slot; the results are contiguous so that
    // one copy brings them all back.
    const std::size_t n = xs.size(), per = cuda::kSumBlocks;
    Scratch s(pool_, sizeof(double) * n * (per + 1));
    double* results = s.as<double>();
    double* partial = results + n;
    for (std::size_t i = 0; i < n; ++i) cuda::sum_squares(in(xs[i]), xs[i].numel(), partial + i * per, results + i, stream_);
    FORESIGHT_CUDA(cudaMemcpyAsync(r.data(), results, sizeof(double) * n, cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return r;
  }
  bool all_finite(const Tensor& x) override {
    const OpScope op_scope = profile("all_finite");
    Scratch s(pool_, sizeof(int));
    FORESIGHT_CUDA(cudaMemsetAsync(s.as<int>(), 0, sizeof(int), stream_));
    cuda::any_non_finite(in(x), x.numel(), s.as<int>(), stream_);
    int flag = 0;
    FORESIGHT_CUDA(cudaMemcpyAsync(&flag, s.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return flag == 0;
  }

  void matmul(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool accumulate) override {
    const auto [M, N, K] = gemm_dims(c, a, ta, b, tb, "matmul");
    const OpScope op_scope = profile_on() ? profile("matmul " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                                    std::to_string(K) + (ta ? " t" : " n") + (tb ? "t" : "n") +
                                                    (accumulate ? " +=" : ""))
                                          : OpScope{};
    if (M == 0 || N == 0) return;
    if (K == 0) {
      if (!accumulate) fill(c, 0.0f);
      return;
    }
    // Under bf16 the operands are read as bf16 (an fp32 one is rounded into scratch first, as the
    // CPU backend's gemm_operand does); c is bf16 (an activation, rounded once from the fp32 sum)
    // or fp32 (a weight gradient accumulating into its main-grad, beta = 1).
    std::optional<Scratch> sa, sb;
    const cuda::In pa = gemm_operand(a, sa), pb = gemm_operand(b, sb);
    const float beta = accumulate ? 1.0f : 0.0f;
    if (bf16() && lt_gemm_ &&
        lt_gemm(ta, tb, M, N, K, pa, a.cols(), pb, b.cols(), beta, out(c), kernels::Epilogue::none))
      return;
    gemm(ta, tb, M, N, K, 1.0f, pa, a.cols(), 0, pb, b.cols(), 0, beta, out(c), N, 0, 1);
  }
  void matmul_bias(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& bias) override {
    const auto [M, N, K] = gemm_dims(c, a, ta, b, tb, "matmul_bias");
    FORESIGHT_CHECK(bias.numel() == N) << "matmul_bias: bias of " << bias.numel() << " for " << N << " columns";
    if (!bf16() || c.storage() != Storage::packed_bf16 || M == 0 || N == 0 || K == 0) {
      // fp32 (or nothing to fuse): the sum and the bias meet in fp32 either way.
      Backend::matmul_bias(c, a, ta, b, tb, bias);
      return;
    }
    check_device(bias, "matmul_bias");
    std::optional<Scratch> sa, sb, sbias;
    const cuda::In pa = gemm_operand(a, sa), pb = gemm_operand(b, sb), pbias = gemm_operand(bias, sbias);
    if (bias_epilogue_ &&
        lt_gemm(ta, tb, M, N, K, pa, a.cols(), pb, b.cols(), 0.0f, out(c), kernels::Epilogue::bias, &pbias))
      return;
    // No epilogue for these pointers: the same single rounding in three steps, through an fp32
    // copy of the sum (what the CPU backend and cuBLASLt's epilogue compute).
    const Fp32Sum sum = fp32_sum("matmul_bias", ta, tb, M, N, K, pa, a.cols(), pb, b.cols());
    cuda::add_bias(sum.out(), pbias, M, N, stream_);
    cuda::convert(out(c), sum.out(), M * N, stream_);
  }
  void matmul_bias_gelu(Tensor y, Tensor pre, const Tensor& a, bool ta, const Tensor& b, bool tb,
                        const Tensor& bias) override {
    const auto [M, N, K] = gemm_dims(pre, a, ta, b, tb, "matmul_bias_gelu");
    check_same_shape(y, pre, "matmul_bias_gelu");
    FORESIGHT_CHECK(bias.numel() == N) << "matmul_bias_gelu: bias of " << bias.numel() << " for " << N << " columns";
    if (!bf16() || pre.storage() != Storage::packed_bf16 || y.storage() != Storage::packed_bf16 || M == 0 ||
        N == 0 || K == 0) {
      Backend::matmul_bias_gelu(y, pre, a, ta, b, tb, bias);  // fp32: the pair is the same arithmetic
      return;
    }
    check_device(bias, "matmul_bias_gelu");
    std::optional<Scratch> sa, sb, sbias;
    const cuda::In pa = gemm_operand(a, sa), pb = gemm_operand(b, sb), pbias = gemm_operand(bias, sbias);
    const cuda::Out aux = out(pre);
    if (gelu_epilogue_ && lt_gemm(ta, tb, M, N, K, pa, a.cols(), pb, b.cols(), 0.0f, out(y),
                                  kernels::Epilogue::bias_gelu_aux, &pbias, &aux))
      return;
    // No epilogue: the same roundings through an fp32 copy of the sum, then one pass writing the
    // rounded pre-activation and the GeLU of the unrounded one.
    const Fp32Sum sum = fp32_sum("matmul_bias_gelu", ta, tb, M, N, K, pa, a.cols(), pb, b.cols());
    cuda::bias_gelu_from_fp32(out(y), out(pre), sum.data(), pbias, M, N, stream_);
  }
  void matmul_dgelu(Tensor dx, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& pre) override {
    const auto [M, N, K] = gemm_dims(dx, a, ta, b, tb, "matmul_dgelu");
    check_same_shape(dx, pre, "matmul_dgelu");
    if (!bf16() || dx.storage() != Storage::packed_bf16 || pre.storage() != Storage::packed_bf16 || M == 0 ||
        N == 0 || K == 0) {
      Backend::matmul_dgelu(dx, a, ta, b, tb, pre);  // fp32: the pair is the same arithmetic
      return;
    }
    check_device(pre, "matmul_dgelu");
    std::optional<Scratch> sa, sb;
    const cuda::In pa = gemm_operand(a, sa), pb = gemm_operand(b, sb);
    // cuBLASLt reads the aux matrix only (DGELU); its pointer is declared writable.
    const cuda::Out aux{const_cast<void*>(in(pre).data), cuda::Type::bf16};
    if (gelu_epilogue_ &&
        lt_gemm(ta, tb, M, N, K, pa, a.cols(), pb, b.cols(), 0.0f, out(dx), kernels::Epilogue::dgelu, nullptr, &aux))
      return;
    const Fp32Sum sum = fp32_sum("matmul_dgelu", ta, tb, M, N, K, pa, a.cols(), pb, b.cols());
    cuda::dgelu_from_fp32(out(dx), sum.data(), in(pre), M * N, stream_);
  }
  void add_bias(Tensor y, const Tensor& bias) override {
    const OpScope op_scope = profile("add_bias");
    FORESIGHT_CHECK(bias.numel() == y.cols()) << bias.numel() << " vs " << y.cols();
    cuda::add_bias(out(y), in(bias), y.rows(), y.cols(), stream_);
  }
  void bias_backward(Tensor dbias, const Tensor& dy) override {
    const OpScope op_scope = profile("bias_backward");
    FORESIGHT_CHECK(dbias.numel() == dy.cols()) << dbias.numel() << " vs " << dy.cols();
    Scratch partial(pool_, sizeof(double) * std::size_t(cuda::column_scratch_doubles(dy.rows(), dy.cols())));
    cuda::bias_backward(out(dbias), in(dy), dy.rows(), dy.cols(), partial.as<double>(), stream_);
  }

  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& gamma,
                         const Tensor& beta) override {
    const OpScope op_scope = profile("layernorm_forward");
    check_same_shape(y, x, "layernorm_forward");
    cuda::layernorm_forward(out(y), fp32(mean, "layernorm_forward", "mean"), fp32(rstd, "layernorm_forward", "rstd"),
                            in(x), in(gamma), in(beta), x.rows(), x.cols(), kLayerNormEps, stream_);
  }
  void layernorm_backward(Tensor dx, Tensor dgamma, Tensor dbeta, const Tensor& dy, const Tensor& x,
                          const Tensor& mean, const Tensor& rstd, const Tensor& gamma) override {
    const OpScope op_scope = profile("layernorm_backward");
    check_same_shape(dx, x, "layernorm_backward");
    Scratch partial(pool_, 2 * sizeof(double) * std::size_t(cuda::column_scratch_doubles(x.rows(), x.cols())));
    cuda::layernorm_backward(out(dx), out(dgamma), out(dbeta), in(dy), in(x), fp32(mean, "layernorm_backward", "mean"),
                             fp32(rstd, "layernorm_backward", "rstd"), in(gamma), x.rows(), x.cols(),
                             partial.as<double>(), stream_);
  }
  void gelu_forward(Tensor y, const Tensor& x) override {
    const OpScope op_scope = profile("gelu_forward");
    check_same_shape(y, x, "gelu_forward");
    cuda::gelu_forward(out(y), in(x), x.numel(), stream_);
  }
  void gelu_backward(Tensor dx, const Tensor& dy, const Tensor& x) override {
    const OpScope op_scope = profile("gelu_backward");
    check_same_shape(dx, x, "gelu_backward");
    cuda::gelu_backward(out(dx), in(dy), in(x), x.numel(), stream_);
  }

  // Attention as Megatron-LM's unfused path: per sequence, one strided-batched GEMM over the heads
  // for the scores (written straight into `probs`, of the activation type: bf16 scores under
  // bf16, as Megatron's baddbmm writes them), a masked softmax in place, one batched GEMM for
  // probs x V. The backward is the same products transposed, with dS from softmax_backward; the
  // 1/sqrt(D) of the scores is applied as the dQ and dK GEMMs' alpha, after dS is rounded (the
  // CPU backend's order).
  // Fused attention (kernels::attention_forward/backward: FlashAttention-2 structure on bf16
  // tensor cores, lse saved instead of probs) under the bf16 recipe when the kernels take the
  // shape; FORESIGHT_ATTENTION=unfused keeps Megatron-LM's unfused path below,
  // FORESIGHT_ATTENTION=pipelined takes the kernels' cp.async double-buffered form.
  AttentionSaved attention_saved(const AttentionShape& s) const override {
    if (fused_attention(s)) return {std::int64_t(s.batch) * s.heads * s.seq, 1, true};
    return Backend::attention_saved(s);
  }

  void attention_forward(Tensor out_t, Tensor probs, const Tensor& qkv, const Tensor& kv,
                         const AttentionShape& s) override {
    const OpScope op_scope = profile("attention_forward");
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys();
    FORESIGHT_CHECK(qkv.cols() == 3 * HD && kv.cols() == 3 * HD && out_t.cols() == HD &&
                    qkv.rows() == std::int64_t(s.batch) * S && kv.rows() == std::int64_t(s.batch) * C && C >= S &&
                    probs.rows() == std::int64_t(s.batch) * s.heads * S)
        << "attention_forward shapes";
    check_activation(qkv, "attention_forward", "qkv");
    check_activation(kv, "attention_forward", "kv");
    if (saved_is_lse(probs, s)) {
      check_activation(out_t, "attention_forward", "out");
      kernels::attention_forward(bf16_at(qkv, 0), bf16_at(kv, HD), bf16_at(kv, 2 * HD), bf16_at(out_t, 0),
                                 probs.data(), kernel_shape(s), stream_);
      return;
    }
    FORESIGHT_CHECK(probs.cols() == C) << "attention_forward: probs has " << probs.cols() << " columns, keys " << C;
    check_activation(probs, "attention_forward", "probs");
    const std::int64_t ld = qkv.cols();
    const float scale = float(1.0 / std::sqrt(double(D)));
    for (int b = 0; b < s.batch; ++b) {
      const cuda::In q = in(qkv, b * S * ld), k = in(kv, b * C * ld + HD), v = in(kv, b * C * ld + 2 * HD);
      const cuda::Out p = out(probs, std::int64_t(b) * s.heads * S * C);
      gemm(false, true, S, C, D, scale, q, ld, D, k, ld, D, 0.0f, p, C, S * C, s.heads);
      cuda::causal_softmax(p, std::int64_t(s.heads) * S, S, C, stream_);
      gemm(false, false, S, D, C, 1.0f, p, C, S * C, v, ld, D, 0.0f, out(out_t, b * S * HD), HD, D, s.heads);
    }
  }
  void attention_backward(Tensor dqkv, Tensor dkv, const Tensor& dout, const Tensor& out_t, const Tensor& probs,
                          const Tensor& qkv, const Tensor& kv, const AttentionShape& s) override {
    const OpScope op_scope = profile("attention_backward");
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys();
    check_same_shape(dqkv, qkv, "attention_backward");
    check_same_shape(dkv, kv, "attention_backward");
    check_activation(qkv, "attention_backward", "qkv");
    check_activation(kv, "attention_backward", "kv");
    check_activation(dout, "attention_backward", "dout");
    if (saved_is_lse(probs, s)) {
      check_activation(out_t, "attention_backward", "out");
      check_activation(dqkv, "attention_backward", "dqkv");
      kernels::AttentionShape ks = kernel_shape(s);
      Scratch delta(pool_, kernels::attention_backward_workspace_bytes(ks));
      if (dkv.storage() == Storage::packed_bf16) {
        ks.accumulate_dkv = true;  // dL/dk, dL/dv added into dkv's bf16 columns (one rounding)
        kernels::attention_backward(bf16_at(qkv, 0), bf16_at(kv, HD), bf16_at(kv, 2 * HD), bf16_at(out_t, 0),
                                    bf16_at(dout, 0), probs.data(), bf16_at(dqkv, 0), bf16_at(dkv, HD),
                                    bf16_at(dkv, 2 * HD), delta.as<void>(), ks, stream_);
        return;
      }
      // An fp32 key/value accumulator (TeraPipe slices): the kernel writes bf16 gradients into a
      // zeroed bf16 copy of dkv's shape, which is then added into it.
      Tensor tmp = make(dkv.rows(), dkv.cols(), ElementType::bf16);
      kernels::attention_backward(bf16_at(qkv, 0), bf16_at(kv, HD), bf16_at(kv, 2 * HD), bf16_at(out_t, 0),
                                  bf16_at(dout, 0), probs.data(), bf16_at(dqkv, 0), bf16_at(tmp, HD),
                                  bf16_at(tmp, 2 * HD), delta.as<void>(), ks, stream_);
      cuda::add(out(dkv), in(tmp), dkv.numel(), stream_);
      return;
    }
    check_activation(probs, "attention_backward", "probs");
    const std::int64_t ld = qkv.cols();
    const float scale = float(1.0 / std::sqrt(double(D)));
    // dL/dprobs, then dL/dscores in place: of the activation type, as probs.
    Scratch ds(pool_, std::size_t(std::int64_t(s.heads) * S * C) * probs.element_bytes());
    const cuda::Out d{ds.as<void>(), type_of(probs)};
    for (int b = 0; b < s.batch; ++b) {
      const cuda::In q = in(qkv, b * S * ld), k = in(kv, b * C * ld + HD), v = in(kv, b * C * ld + 2 * HD);
      const cuda::In p = in(probs, std::int64_t(b) * s.heads * S * C), g = in(dout, b * S * HD);
      const cuda::Out dq = out(dqkv, b * S * ld), dk = out(dkv, b * C * ld + HD), dv = out(dkv, b * C * ld + 2 * HD);
      gemm(false, true, S, C, D, 1.0f, g, HD, D, v, ld, D, 0.0f, d, C, S * C, s.heads);     // dP = dO V^T
      gemm(true, false, C, D, S, 1.0f, p, C, S * C, g, HD, D, 1.0f, dv, ld, D, s.heads);    // dV += P^T dO
      cuda::softmax_backward(d, p, std::int64_t(s.heads) * S, C, stream_);                   // dS
      gemm(false, false, S, D, C, scale, d, C, S * C, k, ld, D, 0.0f, dq, ld, D, s.heads);  // dQ = dS K / sqrt(D)
      gemm(true, false, C, D, S, scale, d, C, S * C, q, ld, D, 1.0f, dk, ld, D, s.heads);   // dK += dS^T Q / sqrt(D)
    }
  }

  void embedding_forward(Tensor x, const Tensor& table, std::span<const std::int32_t> tokens,
                         std::int64_t vocab_offset) override {
    const OpScope op_scope = profile("embedding_forward");
    FORESIGHT_CHECK(x.rows() == std::int64_t(tokens.size()) && x.cols() == table.cols()) << "embedding_forward shapes";
    Scratch t = upload(tokens);
    cuda::embedding_forward(out(x), in(table), t.as<std::int32_t>(), x.rows(), x.cols(), table.rows(), vocab_offset,
                            stream_);
  }
  void gather_rows_weighted(Tensor y, const Tensor& src, std::span<const std::int32_t> rows,
                            std::span<const double> weights, int k) override {
    const OpScope op_scope = profile("gather_rows_weighted");
    check_gather_rows(y, src, rows, weights, k);
    Scratch u = upload(rows, weights);
    cuda::gather_rows_weighted(out(y), in(src), u.as<std::int32_t>(),
                               reinterpret_cast<const double*>(u.as<char>() + ids_bytes_aligned(rows.size())),
                               y.rows(), y.cols(), k, stream_);
  }
  std::vector<double> row_dots(const Tensor& a, std::span<const std::int32_t> a_rows, const Tensor& b,
                               std::span<const std::int32_t> b_rows) override {
    const OpScope op_scope = profile("row_dots");
    check_row_dots(a, a_rows, b, b_rows);
    std::vector<double> dots(a_rows.size(), 0.0);
    if (dots.empty()) return dots;
    // Both index lists in one upload: a's, then b's.
    std::vector<std::int32_t> ids(a_rows.begin(), a_rows.end());
    ids.insert(ids.end(), b_rows.begin(), b_rows.end());
    Scratch u = upload(ids);
    Scratch d(pool_, dots.size() * sizeof(double));
    cuda::row_dots(d.as<double>(), in(a), u.as<std::int32_t>(), in(b), u.as<std::int32_t>() + a_rows.size(),
                   std::int64_t(dots.size()), a.cols(), stream_);
    FORESIGHT_CUDA(cudaMemcpyAsync(dots.data(), d.as<double>(), dots.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                   stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return dots;
  }
  void embedding_backward(Tensor dtable, const Tensor& dx, std::span<const std::int32_t> tokens,
                          std::int64_t vocab_offset) override {
    const OpScope op_scope = profile("embedding_backward");
    FORESIGHT_CHECK(dx.rows() == std::int64_t(tokens.size()) && dx.cols() == dtable.cols()) << "embedding_backward shapes";
    // Rows grouped by token on the host (a counting pass, rows ascending within a token), so that
    // one block per distinct token adds its rows in the CPU's order.
    const std::int64_t V = dtable.rows();
    std::vector<std::int32_t> count(std::size_t(V) + 1, 0);
    for (std::int32_t tok : tokens) {
      const std::int64_t r = std::int64_t(tok) - vocab_offset;
      if (r >= 0 && r < V) ++count[std::size_t(r) + 1];
    }
    std::vector<std::int32_t> first, table_row;  // per distinct token: where its rows start, its row
    std::vector<std::int32_t> start(std::size_t(V), 0);
    std::int32_t at = 0;
    for (std::int64_t r = 0; r < V; ++r)
      if (count[std::size_t(r) + 1] > 0) {
        first.push_back(at);
        table_row.push_back(std::int32_t(r));
        start[std::size_t(r)] = at;
        at += count[std::size_t(r) + 1];
      }
    first.push_back(at);
    std::vector<std::int32_t> order(static_cast<std::size_t>(at));
    for (std::size_t n = 0; n < tokens.size(); ++n) {
      const std::int64_t r = std::int64_t(tokens[n]) - vocab_offset;
      if (r >= 0 && r < V) order[std::size_t(start[std::size_t(r)]++)] = std::int32_t(n);
    }
    const std::int64_t distinct = std::int64_t(table_row.size());
    if (distinct == 0) return;
    Scratch so = upload(order), sf = upload(first), sr = upload(table_row);
    if (dtable.storage() == Storage::float32) {
      cuda::embedding_backward(dtable.data(), in(dx), so.as<std::int32_t>(), sf.as<std::int32_t>(),
                               sr.as<std::int32_t>(), distinct, dx.cols(), stream_);
      return;
    }
    // A bf16 table gradient (the CPU adds floats token by token and rounds once at the end): the
    // same through an fp32 copy.
    Scratch f(pool_, dtable.numel() * sizeof(float));
    const cuda::Out fo{f.as<float>(), cuda::Type::fp32};
    cuda::convert(fo, in(dtable), dtable.numel(), stream_);
    cuda::embedding_backward(f.as<float>(), in(dx), so.as<std::int32_t>(), sf.as<std::int32_t>(),
                             sr.as<std::int32_t>(), distinct, dx.cols(), stream_);
    cuda::convert(out(dtable), fo, dtable.numel(), stream_);
  }
  void add_positions(Tensor x, const Tensor& positions, const TokenPositions& p) override {
    const OpScope op_scope = profile("add_positions");
    check_positions(p, x.rows(), positions.rows());
    cuda::add_positions(out(x), in(positions), x.rows(), x.cols(), p.first_row, p.period, p.offset, stream_);
  }
  void positions_backward(Tensor dpositions, const Tensor& dx, const TokenPositions& p) override {
    const OpScope op_scope = profile("positions_backward");
    check_positions(p, dx.rows(), dpositions.rows());
    cuda::positions_backward(out(dpositions), in(dx), dpositions.rows(), dx.rows(), dx.cols(), p.first_row, p.period,
                             p.offset, stream_);
  }

  void logits_row_max(Tensor row_max, const Tensor& logits) override {
    const OpScope op_scope = profile("logits_row_max");
    cuda::logits_row_max(fp32(row_max, "logits_row_max", "row_max"), in(logits), logits.rows(), logits.cols(), stream_);
  }
  void logits_sum_exp_and_target(Tensor stats, const Tensor& logits, const Tensor& row_max,
                                 std::span<const std::int32_t> targets, std::int64_t vocab_offset) override {
    const OpScope op_scope = profile("logits_sum_exp_and_target");
    FORESIGHT_CHECK(std::int64_t(targets.size()) == logits.rows()) << "targets " << targets.size() << " vs " << logits.rows();
    Scratch t = upload(targets);
    cuda::logits_sum_exp_and_target(fp32(stats, "logits_sum_exp_and_target", "stats"), in(logits),
                                    fp32(row_max, "logits_sum_exp_and_target", "row_max"), t.as<std::int32_t>(),
                                    logits.rows(), logits.cols(), vocab_offset, stream_);
  }
  double cross_entropy_loss_sum(const Tensor& row_max, const Tensor& stats) override {
    // A few floats per token: summed on the host in the CPU backend's order.
    std::vector<float> m(std::size_t(row_max.numel())), st(std::size_t(stats.numel()));
    copy_to_host(m, row_max);
    copy_to_host(st, stats);
    double loss = 0;
    for (std::size_t n = 0; n < m.size(); ++n) loss += std::log(double(st[2 * n])) + m[n] - st[2 * n + 1];
    return loss;
  }
  void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& stats,
                              std::span<const std::int32_t> targets, std::int64_t vocab_offset,
                              float scale) override {
    const OpScope op_scope = profile("cross_entropy_backward");
    check_same_shape(dlogits, logits, "cross_entropy_backward");
    FORESIGHT_CHECK(std::int64_t(targets.size()) == logits.rows()) << "targets " << targets.size() << " vs " << logits.rows();
    Scratch t = upload(targets);
    cuda::cross_entropy_backward(out(dlogits), in(logits), fp32(row_max, "cross_entropy_backward", "row_max"),
                                 fp32(stats, "cross_entropy_backward", "stats"), t.as<std::int32_t>(), logits.rows(),
                                 logits.cols(), vocab_offset, scale, stream_);
  }

  void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWStep& h) override {
    const OpScope op_scope = profile("adamw");
    check_same_shape(param, grad, "adamw");
    const double c1 = 1.0 - std::pow(double(h.beta1), h.step), c2 = 1.0 - std::pow(double(h.beta2), h.step);
    // Master weights, main gradients and moments: fp32 under every recipe.
    cuda::adamw(fp32(param, "adamw", "param"), fp32(grad, "adamw", "grad"), fp32(m, "adamw", "m"), fp32(v, "adamw", "v"),
                param.numel(), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, c1, c2, stream_);
  }

 private:
  bool bf16() const { return precision_ == Precision::bf16; }
  bool profile_on() const { return profiler_ != nullptr; }

  /// Whether attention runs fused (kernels/attention.cu) for this shape: the bf16 recipe, a head
  /// dim the kernels take, 16-byte-aligned rows of the packed qkv (3*H*D a multiple of 8) and the
  /// environment not asking for the unfused path. Pointer alignment is checked per call.
  bool fused_attention(const AttentionShape& s) const {
    if (!bf16() || unfused_attention_) return false;
    return kernels::attention_supports(kernel_shape(s));
  }
  /// The saved tensor is a fused forward's log-sum-exp (fp32, one column) rather than probs.
  bool saved_is_lse(const Tensor& saved, const AttentionShape& s) const {
    return bf16() && saved.storage() == Storage::float32 && saved.cols() == 1 &&
           saved.rows() == std::int64_t(s.batch) * s.heads * s.seq && fused_attention(s);
  }
  kernels::AttentionShape kernel_shape(const AttentionShape& s) const {
    const long ld = 3L * s.heads * s.head_dim;  // packed qkv and kv rows
    kernels::AttentionShape k;
    k.B = s.batch;
    k.T = s.seq;
    k.H = s.heads;
    k.D = s.head_dim;
    k.C = s.keys();
    k.ld_q = ld;
    k.ld_kv = ld;
    k.ld_o = long(s.heads) * s.head_dim;
    k.pipelined = pipelined_attention_;
    return k;
  }
  /// A bf16 tensor's elements from `elements` on, as the kernels take them (16-byte aligned or
  /// the launcher refuses).
  static kernels::bf16* bf16_at(const Tensor& t, std::int64_t elements) {
    FORESIGHT_CHECK(t.storage() == Storage::packed_bf16) << "a fused-attention operand that is not packed bf16";
    return static_cast<kernels::bf16*>(t.raw()) + elements;
  }
  OpScope profile(const std::string& name) {
    if (!profiler_) return {};
    return {profiler_.get(), profiler_->begin(name).second};
  }

  Tensor make(std::int64_t rows, std::int64_t cols, ElementType type) {
    FORESIGHT_CHECK(rows >= 0 && cols >= 0) << rows << "x" << cols;
    auto buf = std::make_shared<DeviceBuffer>(pool_, std::size_t(rows * cols), type);
    if (rows * cols > 0) FORESIGHT_CUDA(cudaMemsetAsync(buf->raw, 0, buf->bytes(), stream_));  // 0x0000 is bf16 +0 too
    return Tensor(std::move(buf), 0, rows, cols);
  }

  /// Attention reads its inputs as the activation type the recipe stores (a bf16 operand of a
  /// tensor-core GEMM under bf16) and keeps probs in it.
  void check_activation(const Tensor& t, const char* op, const char* what) const {
    check_device(t, op);
    FORESIGHT_CHECK(t.element_type() == activation_type(precision_))
        << op << ": " << what << " must be of the activation type (" << to_string(precision_) << ")";
  }

  /// A GEMM operand as cuBLAS reads it: the tensor itself, or under bf16 an fp32 tensor rounded
  /// into `scratch` (packed bf16).
  cuda::In gemm_operand(const Tensor& t, std::optional<Scratch>& scratch) {
    check_device(t, "matmul");
    if (!bf16() || t.storage() == Storage::packed_bf16) return in(t);
    scratch.emplace(pool_, std::size_t(t.numel()) * sizeof(kernels::bf16));
    const cuda::Out packed{scratch->as<void>(), cuda::Type::bf16};
    cuda::convert(packed, in(t), t.numel(), stream_);
    return packed;
  }

  /// Row-major C (M,N; ldc) = alpha op(A) op(B) + beta C, `batch` times with the given strides
  /// (elements). cuBLAS is column-major: a row-major matrix is its transpose there, so the call
  /// computes C^T = op(B)^T op(A)^T, B first. fp32 A, B and C (the fp32 recipe): cublasSgemm. bf16
  /// A and B: cublasGemmEx with fp32 compute, C bf16 or fp32 (alpha, beta and the sum fp32).
  void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, cuda::In A, std::int64_t lda,
            std::int64_t sA, cuda::In B, std::int64_t ldb, std::int64_t sB, float beta, cuda::Out C, std::int64_t ldc,
            std::int64_t sC, int batch) {
    FORESIGHT_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31)) << "GEMM dimensions beyond cuBLAS's int";
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!bf16()) {
      FORESIGHT_CHECK(A.type == cuda::Type::fp32 && B.type == cuda::Type::fp32 && C.type == cuda::Type::fp32)
          << "a bf16 tensor in an fp32-recipe GEMM";
      FORESIGHT_CUBLAS(cublasSgemmStridedBatched(blas_, opB, opA, int(N), int(M), int(K), &alpha,
                                                 static_cast<const float*>(B.data), int(ldb), sB,
                                                 static_cast<const float*>(A.data), int(lda), sA, &beta,
                                                 static_cast<float*>(C.data), int(ldc), sC, batch));
      return;
    }
    FORESIGHT_CHECK(A.type == cuda::Type::bf16 && B.type == cuda::Type::bf16) << "an fp32 operand in a bf16 GEMM";
    FORESIGHT_CUBLAS(cublasGemmStridedBatchedEx(blas_, opB, opA, int(N), int(M), int(K), &alpha, B.data, CUDA_R_16BF,
                                                int(ldb), sB, A.data, CUDA_R_16BF, int(lda), sA, &beta, C.data,
                                                cublas_type(C.type), int(ldc), sC, batch, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
  }

  /// (M, N, K) of c (M,N) = op(a) (M,K) op(b) (K,N), checked against the three shapes.
  static std::tuple<std::int64_t, std::int64_t, std::int64_t> gemm_dims(const Tensor& c, const Tensor& a, bool ta,
                                                                        const Tensor& b, bool tb, const char* op) {
    const std::int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols();
    const std::int64_t Kb = tb ? b.cols() : b.rows(), N = tb ? b.rows() : b.cols();
    FORESIGHT_CHECK(K == Kb && c.rows() == M && c.cols() == N)
        << op << " (" << M << "," << K << ")x(" << Kb << "," << N << ") into (" << c.rows() << "," << c.cols() << ")";
    return {M, N, K};
  }

  /// The unfused epilogues' first step: C (M,N) = op(A) op(B) into fp32 scratch, profiled as
  /// "<op> unfused MxNxK" until the returned value is gone (the epilogue's own pass included).
  struct Fp32Sum {
    OpScope scope;
    Scratch sum;
    cuda::Out out() const { return {sum.as<void>(), cuda::Type::fp32}; }
    const float* data() const { return sum.as<float>(); }
  };
  Fp32Sum fp32_sum(const char* op, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, cuda::In A,
                   std::int64_t lda, cuda::In B, std::int64_t ldb) {
    OpScope scope = profile_on() ? profile(std::string(op) + " unfused " + std::to_string(M) + "x" +
                                           std::to_string(N) + "x" + std::to_string(K))
                                 : OpScope{};
    Fp32Sum r{std::move(scope), Scratch(pool_, std::size_t(M * N) * sizeof(float))};
    gemm(ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, r.out(), N, 0, 1);
    return r;
  }
  /// Row-major C (M,N) = op(A) op(B) (+ beta C) through kernels::try_gemm: cuBLASLt, the GEMM
  /// `foresight calibrate` measures, asked for an algorithm that holds for the operands' real
  /// alignments (a row slice or a parameter's view into the flat working copy starts anywhere) and
  /// keeps split-K partial sums in fp32, so a bf16 C is rounded once, with its epilogue in the sum:
  /// Epilogue::bias adds `bias` (N) over rows; bias_gelu_aux (FC1 with its bias and GeLU: C the
  /// GeLU, *aux the pre-activation) and dgelu (FC2's input gradient through the GeLU: *aux read)
  /// take a bf16 C and aux. False when it has no algorithm for this problem (or the bias or aux is
  /// not 16-byte aligned): the caller falls back.
  bool lt_gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, cuda::In A, std::int64_t lda,
               cuda::In B, std::int64_t ldb, float beta, cuda::Out C, kernels::Epilogue e,
               const cuda::In* bias = nullptr, const cuda::Out* aux = nullptr) {
    if (!lt_ || M >= (1LL << 31) || N >= (1LL << 31) || K >= (1LL << 31)) return false;
    FORESIGHT_CHECK(A.type == cuda::Type::bf16 && B.type == cuda::Type::bf16 && (!bias || bias->type == C.type) &&
                    (!aux || (aux->type == cuda::Type::bf16 && C.type == cuda::Type::bf16)))
        << "lt_gemm: bf16 operands, a bias of C's type, and with an aux matrix a bf16 C";
    const kernels::GemmDims d{.m = int(M), .n = int(N), .k = int(K), .trans_a = ta, .trans_b = tb, .lda = long(lda),
                              .ldb = long(ldb), .ldc = long(N)};
    const auto* a = static_cast<const kernels::bf16*>(A.data);
    const auto* b = static_cast<const kernels::bf16*>(B.data);
    const char* fused = e == kernels::Epilogue::bias            ? "matmul+bias "
                        : e == kernels::Epilogue::bias_gelu_aux ? "matmul+bias+gelu "
                        : e == kernels::Epilogue::dgelu         ? "matmul+dgelu "
                                                                : nullptr;  // plain: the caller's scope
    const OpScope op_scope = profile_on() && fused ? profile(fused + std::to_string(M) + "x" + std::to_string(N) +
                                                             "x" + std::to_string(K) + (ta ? " t" : " n") +
                                                             (tb ? "t" : "n"))
                                                   : OpScope{};
    if (aux)
      return kernels::try_gemm_aux(*lt_, a, b, static_cast<kernels::bf16*>(C.data),
                                   bias ? static_cast<const kernels::bf16*>(bias->data) : nullptr,
                                   static_cast<kernels::bf16*>(aux->data), d, e, stream_);
    if (C.type == cuda::Type::bf16)
      return kernels::try_gemm(*lt_, a, b, static_cast<kernels::bf16*>(C.data),
                               bias ? static_cast<const kernels::bf16*>(bias->data) : nullptr, d, e, 1.0f, beta, stream_);
    return kernels::try_gemm(*lt_, a, b, static_cast<float*>(C.data),
                             bias ? static_cast<const float*>(bias->data) : nullptr, d, e, 1.0f, beta, stream_);
  }

  Scratch upload(std::span<const std::int32_t> ids) { return upload(ids, std::span<const double>{}); }
  /// ids, then (from the first 8-byte boundary after them, at ids_bytes_aligned(ids.size())) the
  /// doubles, in one scratch buffer and one wait.
  static std::size_t ids_bytes_aligned(std::size_t n) { return (std::max<std::size_t>(1, n) * 4 + 7) / 8 * 8; }
  Scratch upload(std::span<const std::int32_t> ids, std::span<const double> values) {
    const std::size_t at = ids_bytes_aligned(ids.size());
    Scratch s(pool_, at + values.size() * sizeof(double));
    if (!ids.empty())
      FORESIGHT_CUDA(cudaMemcpyAsync(s.as<std::int32_t>(), ids.data(), ids.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, stream_));
    if (!values.empty())
      FORESIGHT_CUDA(cudaMemcpyAsync(s.as<char>() + at, values.data(), values.size() * sizeof(double),
                                     cudaMemcpyHostToDevice, stream_));
    // Pageable source: the copy has read it when the call returns (CUDA's pageable-memory rule),
    // but the span's owner may be gone before the stream runs; wait to keep the rule out of it.
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return s;
  }

  static void check_positions(const TokenPositions& p, std::int64_t rows, std::int64_t table_rows) {
    FORESIGHT_CHECK(p.period > 0) << "position period " << p.period;
    for (std::int64_t n = 0; n < std::min<std::int64_t>(rows, p.period); ++n) {
      const std::int64_t r = p.of(n);
      FORESIGHT_CHECK(r >= 0 && r < table_rows) << "position " << r;
    }
  }

  int device_;
  bool tf32_;
  Precision precision_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::shared_ptr<DevicePool> pool_;
  std::unique_ptr<OpProfiler> profiler_;
  // kernels::gemm's cuBLASLt context for the bf16 recipe's GEMMs (FORESIGHT_GEMM=cublas sends the
  // plain ones to cublasGemmEx instead) and their bias epilogue (FORESIGHT_GEMM_EPILOGUE=none turns
  // it off); its workspace is 32 MiB, what PyTorch gives cuBLASLt on Hopper.
  static constexpr std::size_t kLtWorkspaceBytes = 32u << 20;
  bool bias_epilogue_ = true;  // FORESIGHT_GEMM_EPILOGUE: bias or gelu
  bool gelu_epilogue_ = true;  // FORESIGHT_GEMM_EPILOGUE: gelu
  bool lt_gemm_ = true;        // FORESIGHT_GEMM
  std::unique_ptr<Scratch> lt_workspace_;
  std::optional<kernels::BlasContext> lt_;  // on lt_workspace_
  bool unfused_attention_ = false;
  bool pipelined_attention_ = false;  // FORESIGHT_ATTENTION=pipelined: the kernels' cp.async form
};

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(bool tf32, Precision precision) {
  const kernels::DeviceCount c = kernels::device_count();
  if (c.count == 0)
    throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", tf32 ? "cuda-tf32" : "cuda",
                    "needs a visible CUDA GPU (" + c.reason + ")");
  return std::make_unique<CudaBackend>(local_rank() % c.count, tf32, precision);
}

}  // namespace foresight::trainer
