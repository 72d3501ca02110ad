#include "trainer/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "kernels/cublas_check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device.hpp"
#include "trainer/cuda_backend_kernels.hpp"

namespace foresight::trainer {

namespace {

/// A caching allocator in the manner of PyTorch's: freed blocks are kept by size and handed out
/// again, because a training step allocates the same activation shapes every micro-batch and
/// cudaMalloc/cudaFree synchronise the device. Every kernel runs on the backend's one stream, so a
/// block freed while kernels that use it are still queued is safe to reuse on that stream.
class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool() {
    cudaSetDevice(device_);
    release_cached();
  }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  /// Rounded element count of a request (2 KiB granules), the key blocks are kept under.
  static std::size_t rounded(std::size_t n) { return std::max<std::size_t>(512, (n + 511) / 512 * 512); }

  float* get(std::size_t n, std::size_t logical_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    FORESIGHT_CUDA(cudaSetDevice(device_));  // blocks belong to this backend's GPU, whatever is current
    const std::size_t r = rounded(n);
    float* p = nullptr;
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      if (cudaMalloc(reinterpret_cast<void**>(&p), r * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error state of a failed allocation
        release_cached();
        if (cudaMalloc(reinterpret_cast<void**>(&p), r * sizeof(float)) != cudaSuccess) {
          cudaGetLastError();
          std::ostringstream os;
          os << "out of GPU memory: " << r * sizeof(float) << " bytes asked, " << in_use_ << " bytes in use by "
             << "the trainer's tensors";
          throw kernels::CudaError(os.str());
        }
      }
    }
    in_use_ += std::int64_t(logical_bytes);
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void put(float* p, std::size_t n, std::size_t logical_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[rounded(n)].push_back(p);
    in_use_ -= std::int64_t(logical_bytes);
  }
  std::int64_t in_use() const { return in_use_; }
  std::int64_t peak() const { return peak_; }

 private:
  void release_cached() {
    for (auto& [n, blocks] : free_)
      for (float* p : blocks) cudaFree(p);
    free_.clear();
  }
  int device_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<float*>> free_;
  std::int64_t in_use_ = 0, peak_ = 0;
};

struct DeviceBuffer : Buffer {
  std::shared_ptr<DevicePool> pool;
  DeviceBuffer(std::shared_ptr<DevicePool> p, std::size_t n) : pool(std::move(p)) {
    elements = n;
    device = Device::cuda;
    data = pool->get(n, n * sizeof(float));
  }
  ~DeviceBuffer() override { pool->put(data, elements, elements * sizeof(float)); }
};

/// Scratch memory for one call (token ids, partial sums), returned to the pool on scope exit.
class Scratch {
 public:
  Scratch(std::shared_ptr<DevicePool> pool, std::size_t floats) : pool_(std::move(pool)), n_(floats) {
    p_ = pool_->get(n_, 0);
  }
  ~Scratch() {
    if (p_) pool_->put(p_, n_, 0);
  }
  Scratch(Scratch&& o) noexcept : pool_(std::move(o.pool_)), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch& operator=(Scratch&&) = delete;
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(p_);
  }

 private:
  std::shared_ptr<DevicePool> pool_;
  std::size_t n_;
  float* p_ = nullptr;
};

void check_device(const Tensor& t, const char* op) {
  FORESIGHT_CHECK(t.defined() && t.device() == Device::cuda) << op << ": a tensor that is not on the GPU";
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool tf32) : device_(device), tf32_(tf32) {
    FORESIGHT_CUDA(cudaSetDevice(device_));
    FORESIGHT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FORESIGHT_CUBLAS(cublasCreate(&blas_));
    FORESIGHT_CUBLAS(cublasSetStream(blas_, stream_));
    FORESIGHT_CUBLAS(cublasSetMathMode(blas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
    pool_ = std::make_shared<DevicePool>(device_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return tf32_ ? "cuda-tf32" : "cuda"; }
  std::string compute_dtype() const override { return tf32_ ? "tf32" : "fp32"; }
  Device device() const override { return Device::cuda; }
  void* stream() const override { return stream_; }

  Tensor zeros(std::int64_t rows, std::int64_t cols) override {
    FORESIGHT_CHECK(rows >= 0 && cols >= 0) << rows << "x" << cols;
    const std::size_t n = std::size_t(rows * cols);
    auto buf = std::make_shared<DeviceBuffer>(pool_, n);
    if (n > 0) FORESIGHT_CUDA(cudaMemsetAsync(buf->data, 0, n * sizeof(float), stream_));
    return Tensor(std::move(buf), 0, rows, cols);
  }
  void copy_from_host(Tensor dst, std::span<const float> src) override {
    check_device(dst, "copy_from_host");
    FORESIGHT_CHECK(std::int64_t(src.size()) == dst.numel()) << src.size() << " vs " << dst.numel();
    if (src.empty()) return;
    FORESIGHT_CUDA(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));  // the span may go away when we return
  }
  void copy_to_host(std::span<float> dst, const Tensor& src) override {
    check_device(src, "copy_to_host");
    FORESIGHT_CHECK(std::int64_t(dst.size()) == src.numel()) << dst.size() << " vs " << src.numel();
    if (dst.empty()) return;
    FORESIGHT_CUDA(cudaMemcpyAsync(dst.data(), src.data(), dst.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
  }
  void fill(Tensor t, float value) override {
    check_device(t, "fill");
    cuda::fill(t.data(), t.numel(), value, stream_);
  }
  std::int64_t bytes_in_use() const override { return pool_->in_use(); }
  std::int64_t peak_bytes() const override { return pool_->peak(); }

  void copy(Tensor dst, const Tensor& src) override {
    check_same_shape(dst, src, "copy");
    if (src.numel() == 0) return;
    FORESIGHT_CUDA(cudaMemcpyAsync(dst.data(), src.data(), std::size_t(src.numel()) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream_));
  }
  void add(Tensor y, const Tensor& x) override {
    check_same_shape(y, x, "add");
    cuda::add(y.data(), x.data(), y.numel(), stream_);
  }
  double sum_squares(const Tensor& x) override {
    Scratch s(pool_, 2 * (cuda::kSumBlocks + 1));
    double* partial = s.as<double>();
    cuda::sum_squares(x.data(), x.numel(), partial, partial + cuda::kSumBlocks, stream_);
    double r = 0;
    FORESIGHT_CUDA(cudaMemcpyAsync(&r, partial + cuda::kSumBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return r;
  }
  bool all_finite(const Tensor& x) override {
    Scratch s(pool_, 1);
    FORESIGHT_CUDA(cudaMemsetAsync(s.as<int>(), 0, sizeof(int), stream_));
    cuda::any_non_finite(x.data(), x.numel(), s.as<int>(), stream_);
    int flag = 0;
    FORESIGHT_CUDA(cudaMemcpyAsync(&flag, s.as<int>(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    FORESIGHT_CUDA(cudaStreamSynchronize(stream_));
    return flag == 0;
  }

  void matmul(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool accumulate) override {
    const std::int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols();
    const std::int64_t Kb = tb ? b.cols() : b.rows(), N = tb ? b.rows() : b.cols();
    FORESIGHT_CHECK(K == Kb && c.rows() == M && c.cols() == N)
        << "matmul (" << M << "," << K << ")x(" << Kb << "," << N << ") into (" << c.rows() << "," << c.cols() << ")";
    if (M == 0 || N == 0) return;
    if (K == 0) {
      if (!accumulate) fill(c, 0.0f);
      return;
    }
    gemm(ta, tb, M, N, K, 1.0f, a.data(), a.cols(), 0, b.data(), b.cols(), 0, accumulate ? 1.0f : 0.0f, c.data(), N, 0, 1);
  }
  void add_bias(Tensor y, const Tensor& bias) override {
    FORESIGHT_CHECK(bias.numel() == y.cols()) << bias.numel() << " vs " << y.cols();
    cuda::add_bias(y.data(), bias.data(), y.rows(), y.cols(), stream_);
  }
  void bias_backward(Tensor dbias, const Tensor& dy) override {
    FORESIGHT_CHECK(dbias.numel() == dy.cols()) << dbias.numel() << " vs " << dy.cols();
    cuda::bias_backward(dbias.data(), dy.data(), dy.rows(), dy.cols(), stream_);
  }

  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& gamma,
                         const Tensor& beta) override {
    check_same_shape(y, x, "layernorm_forward");
    cuda::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), x.rows(), x.cols(),
                            kLayerNormEps, stream_);
  }
  void layernorm_backward(Tensor dx, Tensor dgamma, Tensor dbeta, const Tensor& dy, const Tensor& x,
                          const Tensor& mean, const Tensor& rstd, const Tensor& gamma) override {
    check_same_shape(dx, x, "layernorm_backward");
    cuda::layernorm_backward(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                             gamma.data(), x.rows(), x.cols(), stream_);
  }
  void gelu_forward(Tensor y, const Tensor& x) override {
    check_same_shape(y, x, "gelu_forward");
    cuda::gelu_forward(y.data(), x.data(), x.numel(), stream_);
  }
  void gelu_backward(Tensor dx, const Tensor& dy, const Tensor& x) override {
    check_same_shape(dx, x, "gelu_backward");
    cuda::gelu_backward(dx.data(), dy.data(), x.data(), x.numel(), stream_);
  }

  // Attention as Megatron-LM's unfused path: per sequence, one strided-batched GEMM over the heads
  // for the scores (written straight into `probs`), a masked softmax in place, one batched GEMM
  // for probs x V. The backward is the same products transposed, with dS from softmax_backward.
  void attention_forward(Tensor out, Tensor probs, const Tensor& qkv, const Tensor& kv,
                         const AttentionShape& s) override {
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys();
    FORESIGHT_CHECK(qkv.cols() == 3 * HD && kv.cols() == 3 * HD && out.cols() == HD &&
                    qkv.rows() == std::int64_t(s.batch) * S && kv.rows() == std::int64_t(s.batch) * C && C >= S &&
                    probs.rows() == std::int64_t(s.batch) * s.heads * S && probs.cols() == C)
        << "attention_forward shapes";
    const std::int64_t ld = qkv.cols();
    const float scale = float(1.0 / std::sqrt(double(D)));
    for (int b = 0; b < s.batch; ++b) {
      const float* q = qkv.data() + b * S * ld;
      const float* k = kv.data() + b * C * ld + HD;
      const float* v = kv.data() + b * C * ld + 2 * HD;
      float* p = probs.data() + std::int64_t(b) * s.heads * S * C;
      gemm(false, true, S, C, D, scale, q, ld, D, k, ld, D, 0.0f, p, C, S * C, s.heads);
      cuda::causal_softmax(p, std::int64_t(s.heads) * S, S, C, stream_);
      gemm(false, false, S, D, C, 1.0f, p, C, S * C, v, ld, D, 0.0f, out.data() + b * S * HD, HD, D, s.heads);
    }
  }
  void attention_backward(Tensor dqkv, Tensor dkv, const Tensor& dout, const Tensor& probs, const Tensor& qkv,
                          const Tensor& kv, const AttentionShape& s) override {
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys();
    check_same_shape(dqkv, qkv, "attention_backward");
    check_same_shape(dkv, kv, "attention_backward");
    const std::int64_t ld = qkv.cols();
    const float scale = float(1.0 / std::sqrt(double(D)));
    Scratch ds(pool_, std::size_t(std::int64_t(s.heads) * S * C));
    for (int b = 0; b < s.batch; ++b) {
      const float* q = qkv.data() + b * S * ld;
      const float* k = kv.data() + b * C * ld + HD;
      const float* v = kv.data() + b * C * ld + 2 * HD;
      const float* p = probs.data() + std::int64_t(b) * s.heads * S * C;
      const float* g = dout.data() + b * S * HD;
      float* dq = dqkv.data() + b * S * ld;
      float* dk = dkv.data() + b * C * ld + HD;
      float* dv = dkv.data() + b * C * ld + 2 * HD;
      float* d = ds.as<float>();
      gemm(false, true, S, C, D, 1.0f, g, HD, D, v, ld, D, 0.0f, d, C, S * C, s.heads);      // dP = dO V^T
      gemm(true, false, C, D, S, 1.0f, p, C, S * C, g, HD, D, 1.0f, dv, ld, D, s.heads);     // dV += P^T dO
      cuda::softmax_backward(d, p, std::int64_t(s.heads) * S, C, scale, stream_);            // dS
      gemm(false, false, S, D, C, 1.0f, d, C, S * C, k, ld, D, 0.0f, dq, ld, D, s.heads);    // dQ = dS K
      gemm(true, false, C, D, S, 1.0f, d, C, S * C, q, ld, D, 1.0f, dk, ld, D, s.heads);     // dK += dS^T Q
    }
  }

  void embedding_forward(Tensor x, const Tensor& table, std::span<const std::int32_t> tokens,
                         std::int64_t vocab_offset) override {
    FORESIGHT_CHECK(x.rows() == std::int64_t(tokens.size()) && x.cols() == table.cols()) << "embedding_forward shapes";
    Scratch t = upload(tokens);
    cuda::embedding_forward(x.data(), table.data(), t.as<std::int32_t>(), x.rows(), x.cols(), table.rows(), vocab_offset,
                            stream_);
  }
  void embedding_backward(Tensor dtable, const Tensor& dx, std::span<const std::int32_t> tokens,
                          std::int64_t vocab_offset) override {
    FORESIGHT_CHECK(dx.rows() == std::int64_t(tokens.size()) && dx.cols() == dtable.cols()) << "embedding_backward shapes";
    Scratch t = upload(tokens);
    cuda::embedding_backward(dtable.data(), dx.data(), t.as<std::int32_t>(), dx.rows(), dx.cols(), dtable.rows(),
                             vocab_offset, stream_);
  }
  void add_positions(Tensor x, const Tensor& positions, const TokenPositions& p) override {
    check_positions(p, x.rows(), positions.rows());
    cuda::add_positions(x.data(), positions.data(), x.rows(), x.cols(), p.first_row, p.period, p.offset, stream_);
  }
  void positions_backward(Tensor dpositions, const Tensor& dx, const TokenPositions& p) override {
    check_positions(p, dx.rows(), dpositions.rows());
    cuda::positions_backward(dpositions.data(), dx.data(), dpositions.rows(), dx.rows(), dx.cols(), p.first_row, p.period,
                             p.offset, stream_);
  }

  void logits_row_max(Tensor row_max, const Tensor& logits) override {
    cuda::logits_row_max(row_max.data(), logits.data(), logits.rows(), logits.cols(), stream_);
  }
  void logits_sum_exp_and_target(Tensor stats, const Tensor& logits, const Tensor& row_max,
                                 std::span<const std::int32_t> targets, std::int64_t vocab_offset) override {
    FORESIGHT_CHECK(std::int64_t(targets.size()) == logits.rows()) << "targets " << targets.size() << " vs " << logits.rows();
    Scratch t = upload(targets);
    cuda::logits_sum_exp_and_target(stats.data(), logits.data(), row_max.data(), t.as<std::int32_t>(), logits.rows(),
                                    logits.cols(), vocab_offset, stream_);
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
    check_same_shape(dlogits, logits, "cross_entropy_backward");
    FORESIGHT_CHECK(std::int64_t(targets.size()) == logits.rows()) << "targets " << targets.size() << " vs " << logits.rows();
    Scratch t = upload(targets);
    cuda::cross_entropy_backward(dlogits.data(), logits.data(), row_max.data(), stats.data(), t.as<std::int32_t>(),
                                 logits.rows(), logits.cols(), vocab_offset, scale, stream_);
  }

  void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWStep& h) override {
    check_same_shape(param, grad, "adamw");
    const double c1 = 1.0 - std::pow(double(h.beta1), h.step), c2 = 1.0 - std::pow(double(h.beta2), h.step);
    cuda::adamw(param.data(), grad.data(), m.data(), v.data(), param.numel(), h.lr, h.beta1, h.beta2, h.eps,
                h.weight_decay, h.grad_scale, c1, c2, stream_);
  }

 private:
  /// Row-major C (M,N; ldc) = alpha op(A) op(B) + beta C, `batch` times with the given strides
  /// (elements). cuBLAS is column-major: a row-major matrix is its transpose there, so the call
  /// computes C^T = op(B)^T op(A)^T, B first.
  void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
            std::int64_t lda, std::int64_t sA, const float* B, std::int64_t ldb, std::int64_t sB, float beta, float* C,
            std::int64_t ldc, std::int64_t sC, int batch) {
    FORESIGHT_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31)) << "GEMM dimensions beyond cuBLAS's int";
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    FORESIGHT_CUBLAS(cublasSgemmStridedBatched(blas_, opB, opA, int(N), int(M), int(K), &alpha, B, int(ldb), sB, A,
                                               int(lda), sA, &beta, C, int(ldc), sC, batch));
  }

  Scratch upload(std::span<const std::int32_t> ids) {
    Scratch s(pool_, std::max<std::size_t>(1, ids.size()));
    if (!ids.empty())
      FORESIGHT_CUDA(cudaMemcpyAsync(s.as<std::int32_t>(), ids.data(), ids.size() * sizeof(std::int32_t),
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
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::shared_ptr<DevicePool> pool_;
};

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(bool tf32) {
  const kernels::DeviceCount c = kernels::device_count();
  if (c.count == 0)
    throw SpecError(SourceLocation{"command line", 0, 0}, "--backend", tf32 ? "cuda-tf32" : "cuda",
                    "needs a visible CUDA GPU (" + c.reason + ")");
  return std::make_unique<CudaBackend>(local_rank() % c.count, tf32);
}

}  // namespace foresight::trainer
