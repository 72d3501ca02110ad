#include "trainer/cpu_backend.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.hpp"
#include "trainer/op_profile.hpp"

namespace foresight::trainer {

// Here rather than in backend.cpp: the CPU backend is a library of its own (foresight_trainer_cpu,
// which `foresight calibrate --backend cpu` links without the trainer's MPI), and every backend
// uses this check.
void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  FORESIGHT_CHECK(a.rows() == b.rows() && a.cols() == b.cols())
      << op << ": (" << a.rows() << "," << a.cols() << ") vs (" << b.rows() << "," << b.cols() << ")";
}

void check_gather_rows(const Tensor& out, const Tensor& src, std::span<const std::int32_t> rows,
                       std::span<const double> weights, int k) {
  FORESIGHT_CHECK(k >= 1 && std::int64_t(rows.size()) == out.rows() * k && weights.size() == rows.size() &&
                  out.cols() == src.cols())
      << "gather_rows_weighted: out (" << out.rows() << "," << out.cols() << "), src (" << src.rows() << ","
      << src.cols() << "), k " << k << ", " << rows.size() << " rows, " << weights.size() << " weights";
  for (const std::int32_t r : rows)
    FORESIGHT_CHECK(r < src.rows()) << "gather_rows_weighted: row " << r << " of a " << src.rows() << "-row source";
}

void check_row_dots(const Tensor& a, std::span<const std::int32_t> a_rows, const Tensor& b,
                    std::span<const std::int32_t> b_rows) {
  FORESIGHT_CHECK(a_rows.size() == b_rows.size() && a.cols() == b.cols())
      << "row_dots: " << a_rows.size() << " vs " << b_rows.size() << " rows, columns " << a.cols() << " vs " << b.cols();
  for (std::size_t i = 0; i < a_rows.size(); ++i)
    FORESIGHT_CHECK(a_rows[i] < a.rows() && b_rows[i] < b.rows())
        << "row_dots: pair " << i << " (" << a_rows[i] << ", " << b_rows[i] << ") of " << a.rows() << " and "
        << b.rows() << " rows";
}

namespace {

/// The CPU GEMM's cache blocking: columns of B per panel, and doubles of B per block of k rows
/// (256 KiB).
constexpr std::int64_t kGemmPanelColumns = 128;
constexpr std::int64_t kGemmBlockDoubles = 32768;

/// Allocation counters shared by the backend and its buffers (a buffer may outlive a call).
struct Usage {
  std::atomic<std::int64_t> in_use{0};
  std::atomic<std::int64_t> peak{0};
};

/// A host allocation. It counts in the usage the bytes a device would hold (2 per bf16 element,
/// though the CPU keeps every element in a float), so the reported memory is the recipe's.
struct HostBuffer : Buffer {
  std::vector<float> storage;
  std::shared_ptr<Usage> usage;
  HostBuffer(std::size_t n, std::shared_ptr<Usage> u, Device tag, ElementType t) : storage(n, 0.0f), usage(std::move(u)) {
    raw = storage.data();
    elements = n;
    device = tag;
    type = t;
    const std::int64_t now = usage->in_use += std::int64_t(n) * bytes_per_element(type);
    std::int64_t peak = usage->peak.load();
    while (now > peak && !usage->peak.compare_exchange_weak(peak, now)) {
    }
  }
  ~HostBuffer() override { usage->in_use -= std::int64_t(elements) * bytes_per_element(type); }
};

const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

/// GeLU's 0.5 (1 + tanh u), u = sqrt(2/pi) (v + 0.044715 v^3), as the logistic 1 / (1 + e^(-2u)):
/// the same function, without 1 + tanh u cancelling for very negative v (to exactly 0 below
/// v ~ -7 in double, below v ~ -4 in float). 1 - tanh^2 u = 4 s (1 - s) likewise.
double gelu_sigmoid(double v) {
  const double u = kSqrt2OverPi * (v + 0.044715 * v * v * v);
  return 1.0 / (1.0 + std::exp(-2.0 * u));
}

/// d GeLU(v) / dv of the same form: s + 2 v s (1 - s) u', s = gelu_sigmoid(v).
double gelu_derivative(double v) {
  const double s = gelu_sigmoid(v);
  return s + 2.0 * v * s * (1.0 - s) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * v * v);
}

/// The value an op stores into an element of `t`: float(v), rounded to bf16 when t is bf16.
float store(const Tensor& t, double v) {
  const float f = float(v);
  return t.element_type() == ElementType::bf16 ? kernels::round_bf16(f) : f;
}

/// The elements of a GEMM operand as the tensor core reads them: `t` itself when it is already bf16
/// (or under fp32), else a copy rounded to bf16 in `scratch`.
const float* gemm_operand(const Tensor& t, bool bf16, std::vector<float>& scratch) {
  if (!bf16 || t.element_type() == ElementType::bf16) return t.data();
  scratch.assign(t.data(), t.data() + t.numel());
  round_to_bf16(scratch.data(), scratch.size());
  return scratch.data();
}

/// Freed host memory stays with the process for the next tensor, as the CUDA backend's DevicePool
/// keeps freed device blocks. By default glibc serves a block over 128 KiB with a fresh mmap and
/// gives the top of the heap back to the kernel once 128 KiB of it are free, so a step that frees
/// and reallocates its activations page-faults them in again, layer after layer. Under MPI one rank
/// then stalls in the kernel while its peer waits in the next collective: on the 2-core CI VM a
/// sequence-parallel tp2 step of the closed loop took 0.085 s with glibc's defaults and 0.059-0.060
/// s with these settings (five runs each, alternated; session 54, notes/status.md), its
/// reduce-scatters 55 ms against 15 ms of the run. Blocks up to 32 MiB (glibc's largest mmap
/// threshold on 64-bit) come from the heap, and the heap is never trimmed. Process-wide and set once;
/// the calibration (`foresight calibrate --backend cpu`) creates the backend too, so its ops are
/// timed under the same allocator.
void keep_freed_host_memory() {
#if defined(__GLIBC__)
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)once;
#endif
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(bool staged, Precision precision) : staged_(staged), precision_(precision) { keep_freed_host_memory(); }
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;
  ~CpuBackend() override {
    if (profiler_) print_op_profile(stderr, "CPU", profiler_->times());
  }
  std::string name() const override { return staged_ ? "cpu-staged" : "cpu"; }
  std::string compute_dtype() const override { return to_string(precision_); }
  Precision precision() const override { return precision_; }
  Device device() const override { return staged_ ? Device::cuda : Device::host; }

  Tensor zeros(std::int64_t rows, std::int64_t cols) override {
    const HostOpTimer op_timer = timed("zeros");
    return make(rows, cols, activation_type(precision_));
  }
  Tensor zeros_fp32(std::int64_t rows, std::int64_t cols) override {
    const HostOpTimer op_timer = timed("zeros");
    return make(rows, cols, ElementType::fp32);
  }
  void copy_from_host(Tensor dst, std::span<const float> src) override {
    const HostOpTimer op_timer = timed("copy_from_host");
    FORESIGHT_CHECK(std::int64_t(src.size()) == dst.numel()) << src.size() << " vs " << dst.numel();
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    round_if_bf16(dst);
  }
  void copy_to_host(std::span<float> dst, const Tensor& src) override {
    const HostOpTimer op_timer = timed("copy_to_host");
    FORESIGHT_CHECK(std::int64_t(dst.size()) == src.numel()) << dst.size() << " vs " << src.numel();
    std::memcpy(dst.data(), src.data(), dst.size() * sizeof(float));
  }
  void fill(Tensor t, float value) override {
    const HostOpTimer op_timer = timed("fill");
    std::fill(t.data(), t.data() + t.numel(), store(t, value));
  }
  std::int64_t bytes_in_use() const override { return usage_->in_use.load(); }
  std::int64_t peak_bytes() const override { return usage_->peak.load(); }

  void copy(Tensor dst, const Tensor& src) override {
    const HostOpTimer op_timer = timed("copy");
    check_same_shape(dst, src, "copy");
    std::memcpy(dst.data(), src.data(), std::size_t(src.numel()) * sizeof(float));
    round_if_bf16(dst);  // e.g. the master weights into the bf16 working copy
  }
  void add(Tensor y, const Tensor& x) override {
    const HostOpTimer op_timer = timed("add");
    check_same_shape(y, x, "add");
    float* py = y.data();
    const float* px = x.data();
    for (std::int64_t i = 0; i < y.numel(); ++i) py[i] += px[i];
    round_if_bf16(y);
  }
  double sum_squares(const Tensor& x) override {
    const HostOpTimer op_timer = timed("sum_squares");
    double s = 0;
    const float* p = x.data();
    for (std::int64_t i = 0; i < x.numel(); ++i) s += double(p[i]) * p[i];
    return s;
  }
  bool all_finite(const Tensor& x) override {
    const HostOpTimer op_timer = timed("all_finite");
    const float* p = x.data();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      if (!std::isfinite(p[i])) return false;
    return true;
  }

  void matmul(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool accumulate) override {
    const HostOpTimer op_timer = timed(gemm_op_name(0, ta, tb));
    gemm(c, a, ta, b, tb, accumulate, nullptr);
  }
  void matmul_bias(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& bias) override {
    const HostOpTimer op_timer = timed(gemm_op_name(1, ta, tb));
    FORESIGHT_CHECK(bias.numel() == c.cols()) << bias.numel() << " vs " << c.cols();
    gemm(c, a, ta, b, tb, false, &bias);
  }
  void matmul_bias_gelu(Tensor y, Tensor pre, const Tensor& a, bool ta, const Tensor& b, bool tb,
                        const Tensor& bias) override {
    const HostOpTimer op_timer = timed(gemm_op_name(2, ta, tb));
    FORESIGHT_CHECK(bias.numel() == pre.cols()) << bias.numel() << " vs " << pre.cols();
    check_same_shape(y, pre, "matmul_bias_gelu");
    gemm(pre, a, ta, b, tb, false, &bias, false);  // the float sums, not yet rounded
    for (std::int64_t i = 0; i < pre.numel(); ++i) {
      const double v = pre.data()[i];
      y.data()[i] = store(y, v * gelu_sigmoid(v));
    }
    round_if_bf16(pre);
  }
  void matmul_dgelu(Tensor dx, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& pre) override {
    const HostOpTimer op_timer = timed(gemm_op_name(3, ta, tb));
    check_same_shape(dx, pre, "matmul_dgelu");
    gemm(dx, a, ta, b, tb, false, nullptr, false);  // the float sums, not yet rounded
    for (std::int64_t i = 0; i < pre.numel(); ++i) dx.data()[i] = store(dx, dx.data()[i] * gelu_derivative(pre.data()[i]));
  }
  /// c = op(a) op(b) (+ c when accumulating) (+ bias per column), each element's products summed
  /// in double over k in increasing order, rounded to float, the bias added in float, and a bf16 c
  /// rounded once at the end (unless `round` is false: the fused GeLU ops round after their pass).
  void gemm(Tensor c, const Tensor& a, bool ta, const Tensor& b, bool tb, bool accumulate, const Tensor* bias,
            bool round = true) {
    const std::int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols();
    const std::int64_t Kb = tb ? b.cols() : b.rows(), N = tb ? b.rows() : b.cols();
    FORESIGHT_CHECK(K == Kb && c.rows() == M && c.cols() == N)
        << "matmul (" << M << "," << K << ")x(" << Kb << "," << N << ") into (" << c.rows() << "," << c.cols() << ")";
    // C is written panel by panel while A and B are still being read: an output overlapping an
    // input would read values already overwritten.
    const auto overlaps = [](const Tensor& x, const Tensor& y) {
      return x.numel() > 0 && y.numel() > 0 && x.data() < y.data() + y.numel() && y.data() < x.data() + x.numel();
    };
    FORESIGHT_CHECK(!overlaps(c, a) && !overlaps(c, b)) << "matmul: the output overlaps an input";
    std::vector<float> scratch_a, scratch_b;
    const float* pa = gemm_operand(a, bf16(), scratch_a);
    const float* pb = gemm_operand(b, bf16(), scratch_b);
    float* pc = c.data();
    const std::int64_t lda = a.cols(), ldb = b.cols();
    // Every element of C sums a(i,k) b(k,j) over k in increasing order, in double. B is copied a
    // panel of columns at a time into a k-major double buffer, so that the inner loop over j is a
    // contiguous multiply-add of doubles whatever B's layout; float products are exact in double, so
    // the result has the same bits as a plain triple loop. Two measured reasons (notes/status.md,
    // session 62): the transposed-B (nt) loop had walked B's columns with stride ldb (1.5 GFLOP/s
    // against nn's 11 on the calibration's larger-B shapes), and converting floats inside the inner
    // loop made GCC's baseline x86-64 code store half of each vector to a stack slot and reload it
    // every iteration, a loop whose speed then depended on the stack's address: 1.40x slower at 14
    // of 64 stack offsets (environment padding under `setarch -R`), so ASLR drew a slow or fast
    // process. Without the stack round trip every offset runs alike; with the blocking below nn and tn
    // run 1.8x faster than that loop, nt 5.7x (19-20 GFLOP/s on the calibration's grid).
    // Blocked for the cache: a panel of up to 128 columns of B, a block of k rows of it at a time
    // (256 KiB of doubles, which stays in a core's L2 while every row of A runs over it), with each
    // row's running sums for the panel kept in double between blocks: the additions stay one per k,
    // in increasing k, so blocking changes no bit. Both buffers are kept between calls (the sums
    // are M x 128 doubles, which glibc would otherwise map afresh and fault in on every call); one
    // per thread, should ops ever run concurrently.
    const std::int64_t panel = std::min<std::int64_t>(N, kGemmPanelColumns);
    const std::int64_t kblock = std::max<std::int64_t>(64, kGemmBlockDoubles / std::max<std::int64_t>(panel, 1)) / 4 * 4;
    thread_local std::vector<double> bd, sums;
    if (bd.size() < static_cast<std::size_t>(kblock * panel)) bd.resize(static_cast<std::size_t>(kblock * panel));
    if (sums.size() < static_cast<std::size_t>(M * panel)) sums.resize(static_cast<std::size_t>(M * panel));
    for (std::int64_t j0 = 0; j0 < N; j0 += panel) {
      const std::int64_t J = std::min(panel, N - j0);
      std::fill(sums.begin(), sums.begin() + M * J, 0.0);
      for (std::int64_t k0 = 0; k0 < K; k0 += kblock) {
        const std::int64_t k1 = std::min(K, k0 + kblock);
        for (std::int64_t k = k0; k < k1; ++k) {
          double* dst = bd.data() + (k - k0) * J;
          if (tb)
            for (std::int64_t j = 0; j < J; ++j) dst[j] = pb[(j0 + j) * ldb + k];
          else
            for (std::int64_t j = 0; j < J; ++j) dst[j] = pb[k * ldb + j0 + j];
        }
        for (std::int64_t i = 0; i < M; ++i) {
          double* acc = sums.data() + i * J;
          const auto a_at = [&](std::int64_t k) -> double { return ta ? pa[k * lda + i] : pa[i * lda + k]; };
          std::int64_t k = k0;
          // Four k at a time, each element's running sum kept in a register across them (the same
          // additions in the same order as one k at a time: a quarter of the loads and stores of acc).
          for (; k + 4 <= k1; k += 4) {
            const double a0 = a_at(k), a1 = a_at(k + 1), a2 = a_at(k + 2), a3 = a_at(k + 3);
            const double* b0 = bd.data() + (k - k0) * J;
            const double *b1 = b0 + J, *b2 = b1 + J, *b3 = b2 + J;
            for (std::int64_t j = 0; j < J; ++j) {
              double s = acc[j];
              s += a0 * b0[j];
              s += a1 * b1[j];
              s += a2 * b2[j];
              s += a3 * b3[j];
              acc[j] = s;
            }
          }
          for (; k < k1; ++k) {
            const double aik = a_at(k);
            const double* src = bd.data() + (k - k0) * J;
            for (std::int64_t j = 0; j < J; ++j) acc[j] += aik * src[j];
          }
        }
      }
      for (std::int64_t i = 0; i < M; ++i) {
        const double* acc = sums.data() + i * J;
        float* row = pc + i * N + j0;
        for (std::int64_t j = 0; j < J; ++j) row[j] = accumulate ? float(row[j] + acc[j]) : float(acc[j]);
        if (bias)
          for (std::int64_t j = 0; j < J; ++j) row[j] += bias->data()[j0 + j];
      }
    }
    if (round) round_if_bf16(c);
  }
  void add_bias(Tensor y, const Tensor& bias) override {
    const HostOpTimer op_timer = timed("add_bias");
    FORESIGHT_CHECK(bias.numel() == y.cols()) << bias.numel() << " vs " << y.cols();
    for (std::int64_t n = 0; n < y.rows(); ++n)
      for (std::int64_t j = 0; j < y.cols(); ++j) y.data()[n * y.cols() + j] += bias.data()[j];
    round_if_bf16(y);
  }
  void bias_backward(Tensor dbias, const Tensor& dy) override {
    const HostOpTimer op_timer = timed("bias_backward");
    FORESIGHT_CHECK(dbias.numel() == dy.cols()) << dbias.numel() << " vs " << dy.cols();
    std::vector<double> s(std::size_t(dy.cols()), 0.0);
    for (std::int64_t n = 0; n < dy.rows(); ++n)
      for (std::int64_t j = 0; j < dy.cols(); ++j) s[j] += dy.data()[n * dy.cols() + j];
    for (std::int64_t j = 0; j < dy.cols(); ++j) dbias.data()[j] = store(dbias, dbias.data()[j] + s[j]);
  }

  void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& gamma,
                         const Tensor& beta) override {
    const HostOpTimer op_timer = timed("layernorm_forward");
    check_same_shape(y, x, "layernorm_forward");
    const std::int64_t C = x.cols();
    for (std::int64_t n = 0; n < x.rows(); ++n) {
      const float* xr = x.data() + n * C;
      double mu = 0;
      for (std::int64_t j = 0; j < C; ++j) mu += xr[j];
      mu /= double(C);
      double var = 0;
      for (std::int64_t j = 0; j < C; ++j) var += (xr[j] - mu) * (xr[j] - mu);
      var /= double(C);
      const double rs = 1.0 / std::sqrt(var + kLayerNormEps);
      mean.data()[n] = store(mean, mu);
      rstd.data()[n] = store(rstd, rs);
      for (std::int64_t j = 0; j < C; ++j)
        y.data()[n * C + j] = store(y, (xr[j] - mu) * rs * gamma.data()[j] + beta.data()[j]);
    }
  }
  void layernorm_backward(Tensor dx, Tensor dgamma, Tensor dbeta, const Tensor& dy, const Tensor& x,
                          const Tensor& mean, const Tensor& rstd, const Tensor& gamma) override {
    const HostOpTimer op_timer = timed("layernorm_backward");
    check_same_shape(dx, x, "layernorm_backward");
    const std::int64_t C = x.cols();
    std::vector<double> dg(std::size_t(C), 0.0), db(std::size_t(C), 0.0), xhat(static_cast<std::size_t>(C));
    for (std::int64_t n = 0; n < x.rows(); ++n) {
      const float* xr = x.data() + n * C;
      const float* dyr = dy.data() + n * C;
      const double mu = mean.data()[n], rs = rstd.data()[n];
      double mean_dxhat = 0, mean_dxhat_xhat = 0;
      for (std::int64_t j = 0; j < C; ++j) {
        xhat[j] = (xr[j] - mu) * rs;
        const double dxhat = double(dyr[j]) * gamma.data()[j];
        mean_dxhat += dxhat;
        mean_dxhat_xhat += dxhat * xhat[j];
        dg[j] += double(dyr[j]) * xhat[j];
        db[j] += dyr[j];
      }
      mean_dxhat /= double(C);
      mean_dxhat_xhat /= double(C);
      for (std::int64_t j = 0; j < C; ++j) {
        const double dxhat = double(dyr[j]) * gamma.data()[j];
        dx.data()[n * C + j] = store(dx, rs * (dxhat - mean_dxhat - xhat[j] * mean_dxhat_xhat));
      }
    }
    for (std::int64_t j = 0; j < C; ++j) {
      dgamma.data()[j] = store(dgamma, dgamma.data()[j] + dg[j]);
      dbeta.data()[j] = store(dbeta, dbeta.data()[j] + db[j]);
    }
  }
  void gelu_forward(Tensor y, const Tensor& x) override {
    const HostOpTimer op_timer = timed("gelu_forward");
    check_same_shape(y, x, "gelu_forward");
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data()[i];
      y.data()[i] = store(y, v * gelu_sigmoid(v));
    }
  }
  void gelu_backward(Tensor dx, const Tensor& dy, const Tensor& x) override {
    const HostOpTimer op_timer = timed("gelu_backward");
    check_same_shape(dx, x, "gelu_backward");
    for (std::int64_t i = 0; i < x.numel(); ++i) dx.data()[i] = store(dx, dy.data()[i] * gelu_derivative(x.data()[i]));
  }

  void attention_forward(Tensor out, Tensor probs, const Tensor& qkv, const Tensor& kv,
                         const AttentionShape& s) override {
    const HostOpTimer op_timer = timed("attention_forward");
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys(), P = C - S;
    FORESIGHT_CHECK(qkv.cols() == 3 * HD && kv.cols() == 3 * HD && out.cols() == HD &&
                    qkv.rows() == std::int64_t(s.batch) * S && kv.rows() == std::int64_t(s.batch) * C && P >= 0 &&
                    probs.rows() == std::int64_t(s.batch) * s.heads * S && probs.cols() == C)
        << "attention_forward shapes";
    const double scale = 1.0 / std::sqrt(double(D));
    const std::int64_t ld = qkv.cols();
    std::vector<double> row(static_cast<std::size_t>(C));
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads; ++h)
        for (std::int64_t i = 0; i < S; ++i) {
          const std::int64_t last = P + i;  // the query's position: it sees keys 0..last
          const float* q = qkv.data() + (b * S + i) * ld + h * D;
          double mx = -std::numeric_limits<double>::infinity();
          for (std::int64_t j = 0; j <= last; ++j) {
            const float* k = kv.data() + (b * C + j) * ld + HD + h * D;
            double dot = 0;
            for (std::int64_t d = 0; d < D; ++d) dot += double(q[d]) * k[d];
            row[j] = materialised(dot * scale);  // the scaled scores: a GEMM output (baddbmm)
            mx = std::max(mx, row[j]);
          }
          double sum = 0;
          for (std::int64_t j = 0; j <= last; ++j) sum += (row[j] = std::exp(row[j] - mx));
          float* p = probs.data() + ((std::int64_t(b) * s.heads + h) * S + i) * C;
          for (std::int64_t j = 0; j < C; ++j) p[j] = j <= last ? store(probs, row[j] / sum) : 0.0f;
          float* o = out.data() + (b * S + i) * HD + h * D;
          for (std::int64_t d = 0; d < D; ++d) {
            double acc = 0;
            for (std::int64_t j = 0; j <= last; ++j) acc += double(p[j]) * kv.data()[(b * C + j) * ld + 2 * HD + h * D + d];
            o[d] = store(out, acc);
          }
        }
  }
  void attention_backward(Tensor dqkv, Tensor dkv, const Tensor& dout, const Tensor& /*out*/, const Tensor& probs,
                          const Tensor& qkv,
                          const Tensor& kv, const AttentionShape& s) override {
    const HostOpTimer op_timer = timed("attention_backward");
    const std::int64_t HD = std::int64_t(s.heads) * s.head_dim, S = s.seq, D = s.head_dim, C = s.keys(), P = C - S;
    check_same_shape(dqkv, qkv, "attention_backward");
    check_same_shape(dkv, kv, "attention_backward");
    const double scale = 1.0 / std::sqrt(double(D));
    const std::int64_t ld = qkv.cols();
    std::vector<double> dq(static_cast<std::size_t>(S * D)), dk(static_cast<std::size_t>(C * D)),
        dv(static_cast<std::size_t>(C * D)), dp(static_cast<std::size_t>(C));
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads; ++h) {
        std::fill(dq.begin(), dq.end(), 0.0);
        std::fill(dk.begin(), dk.end(), 0.0);
        std::fill(dv.begin(), dv.end(), 0.0);
        auto q = [&](std::int64_t i, std::int64_t d) { return double(qkv.data()[(b * S + i) * ld + h * D + d]); };
        auto k = [&](std::int64_t j, std::int64_t d) { return double(kv.data()[(b * C + j) * ld + HD + h * D + d]); };
        auto v = [&](std::int64_t j, std::int64_t d) { return double(kv.data()[(b * C + j) * ld + 2 * HD + h * D + d]); };
        for (std::int64_t i = 0; i < S; ++i) {
          const std::int64_t last = P + i;
          const float* p = probs.data() + ((std::int64_t(b) * s.heads + h) * S + i) * C;
          const float* g = dout.data() + (b * S + i) * HD + h * D;
          double pdp = 0;
          for (std::int64_t j = 0; j <= last; ++j) {
            double acc = 0;
            for (std::int64_t d = 0; d < D; ++d) {
              acc += double(g[d]) * v(j, d);
              dv[j * D + d] += double(p[j]) * g[d];
            }
            dp[j] = materialised(acc);  // dL/dprobs: a GEMM output (dout v^T)
            pdp += double(p[j]) * dp[j];
          }
          for (std::int64_t j = 0; j <= last; ++j) {
            // The softmax backward's output (dL/dscores), then the score GEMMs' scale.
            const double ds = materialised(double(p[j]) * (dp[j] - pdp)) * scale;
            for (std::int64_t d = 0; d < D; ++d) {
              dq[i * D + d] += ds * k(j, d);
              dk[j * D + d] += ds * q(i, d);
            }
          }
        }
        for (std::int64_t i = 0; i < S; ++i)
          for (std::int64_t d = 0; d < D; ++d) dqkv.data()[(b * S + i) * ld + h * D + d] = store(dqkv, dq[i * D + d]);
        // Added, not overwritten: later TeraPipe slices' queries also read these keys and values.
        for (std::int64_t j = 0; j < C; ++j)
          for (std::int64_t d = 0; d < D; ++d) {
            float* r = dkv.data() + (b * C + j) * ld;
            r[HD + h * D + d] = store(dkv, double(r[HD + h * D + d]) + dk[j * D + d]);
            r[2 * HD + h * D + d] = store(dkv, double(r[2 * HD + h * D + d]) + dv[j * D + d]);
          }
      }
  }

  void embedding_forward(Tensor x, const Tensor& table, std::span<const std::int32_t> tokens,
                         std::int64_t vocab_offset) override {
    const HostOpTimer op_timer = timed("embedding_forward");
    FORESIGHT_CHECK(x.rows() == std::int64_t(tokens.size()) && x.cols() == table.cols()) << "embedding_forward shapes";
    const std::int64_t C = x.cols();
    for (std::int64_t n = 0; n < x.rows(); ++n) {
      const std::int64_t r = tokens[n] - vocab_offset;
      float* dst = x.data() + n * C;
      if (r >= 0 && r < table.rows())
        std::memcpy(dst, table.data() + r * C, std::size_t(C) * sizeof(float));
      else
        std::fill(dst, dst + C, 0.0f);
    }
    round_if_bf16(x);  // a no-op when the table is bf16 too
  }
  void embedding_backward(Tensor dtable, const Tensor& dx, std::span<const std::int32_t> tokens,
                          std::int64_t vocab_offset) override {
    const HostOpTimer op_timer = timed("embedding_backward");
    const std::int64_t C = dx.cols();
    for (std::int64_t n = 0; n < dx.rows(); ++n) {
      const std::int64_t r = tokens[n] - vocab_offset;
      if (r < 0 || r >= dtable.rows()) continue;
      for (std::int64_t j = 0; j < C; ++j) dtable.data()[r * C + j] += dx.data()[n * C + j];
    }
    round_if_bf16(dtable);
  }
  void gather_rows_weighted(Tensor out, const Tensor& src, std::span<const std::int32_t> rows,
                            std::span<const double> weights, int k) override {
    const HostOpTimer op_timer = timed("gather_rows_weighted");
    check_gather_rows(out, src, rows, weights, k);
    const std::int64_t C = out.cols();
    std::vector<double> acc(static_cast<std::size_t>(C));
    for (std::int64_t r = 0; r < out.rows(); ++r) {
      // Term by term over a row, so that every element still sums its terms in j order.
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < k; ++j) {
        const std::int64_t s = rows[std::size_t(r * k + j)];
        if (s < 0) continue;
        const double w = weights[std::size_t(r * k + j)];
        const float* x = src.data() + s * C;
        for (std::int64_t c = 0; c < C; ++c) acc[std::size_t(c)] += w * x[c];
      }
      float* y = out.data() + r * C;
      for (std::int64_t c = 0; c < C; ++c) y[c] = store(out, acc[std::size_t(c)]);
    }
  }
  std::vector<double> row_dots(const Tensor& a, std::span<const std::int32_t> a_rows, const Tensor& b,
                               std::span<const std::int32_t> b_rows) override {
    const HostOpTimer op_timer = timed("row_dots");
    check_row_dots(a, a_rows, b, b_rows);
    const std::int64_t C = a.cols();
    std::vector<double> dots(a_rows.size(), 0.0);
    for (std::size_t i = 0; i < dots.size(); ++i) {
      if (a_rows[i] < 0 || b_rows[i] < 0) continue;
      const float* x = a.data() + std::int64_t(a_rows[i]) * C;
      const float* y = b.data() + std::int64_t(b_rows[i]) * C;
      double d = 0;
      for (std::int64_t c = 0; c < C; ++c) d += double(x[c]) * y[c];
      dots[i] = d;
    }
    return dots;
  }
  void add_positions(Tensor x, const Tensor& positions, const TokenPositions& p) override {
    const HostOpTimer op_timer = timed("add_positions");
    const std::int64_t C = x.cols();
    for (std::int64_t n = 0; n < x.rows(); ++n) {
      const std::int64_t r = p.of(n);
      FORESIGHT_CHECK(r >= 0 && r < positions.rows()) << "position " << r;
      for (std::int64_t j = 0; j < C; ++j) x.data()[n * C + j] += positions.data()[r * C + j];
    }
    round_if_bf16(x);
  }
  void positions_backward(Tensor dpositions, const Tensor& dx, const TokenPositions& p) override {
    const HostOpTimer op_timer = timed("positions_backward");
    const std::int64_t C = dx.cols(), S = dpositions.rows();
    std::vector<double> acc(std::size_t(S * C), 0.0);
    for (std::int64_t n = 0; n < dx.rows(); ++n) {
      const std::int64_t r = p.of(n);
      FORESIGHT_CHECK(r >= 0 && r < S) << "position " << r;
      for (std::int64_t j = 0; j < C; ++j) acc[r * C + j] += dx.data()[n * C + j];
    }
    for (std::int64_t i = 0; i < S * C; ++i) dpositions.data()[i] = store(dpositions, dpositions.data()[i] + acc[i]);
  }

  void logits_row_max(Tensor row_max, const Tensor& logits) override {
    const HostOpTimer op_timer = timed("logits_row_max");
    const std::int64_t V = logits.cols();
    for (std::int64_t n = 0; n < logits.rows(); ++n) {
      const float* l = logits.data() + n * V;
      row_max.data()[n] = store(row_max, *std::max_element(l, l + V));
    }
  }
  void logits_sum_exp_and_target(Tensor stats, const Tensor& logits, const Tensor& row_max,
                                 std::span<const std::int32_t> targets, std::int64_t vocab_offset) override {
    const HostOpTimer op_timer = timed("logits_sum_exp_and_target");
    const std::int64_t V = logits.cols();
    for (std::int64_t n = 0; n < logits.rows(); ++n) {
      const float* l = logits.data() + n * V;
      double s = 0;
      for (std::int64_t j = 0; j < V; ++j) s += std::exp(double(l[j]) - row_max.data()[n]);
      const std::int64_t t = targets[n] - vocab_offset;
      stats.data()[2 * n] = store(stats, s);
      stats.data()[2 * n + 1] = store(stats, (t >= 0 && t < V) ? l[t] : 0.0f);
    }
  }
  double cross_entropy_loss_sum(const Tensor& row_max, const Tensor& stats) override {
    const HostOpTimer op_timer = timed("cross_entropy_loss_sum");
    double loss = 0;
    for (std::int64_t n = 0; n < row_max.rows(); ++n)
      loss += std::log(double(stats.data()[2 * n])) + row_max.data()[n] - stats.data()[2 * n + 1];
    return loss;
  }
  void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& row_max, const Tensor& stats,
                              std::span<const std::int32_t> targets, std::int64_t vocab_offset,
                              float scale) override {
    const HostOpTimer op_timer = timed("cross_entropy_backward");
    check_same_shape(dlogits, logits, "cross_entropy_backward");
    const std::int64_t V = logits.cols();
    for (std::int64_t n = 0; n < logits.rows(); ++n) {
      const double m = row_max.data()[n], inv = 1.0 / double(stats.data()[2 * n]);
      const std::int64_t t = targets[n] - vocab_offset;
      for (std::int64_t j = 0; j < V; ++j) {
        const double p = std::exp(double(logits.data()[n * V + j]) - m) * inv;
        dlogits.data()[n * V + j] = store(dlogits, scale * (p - (j == t ? 1.0 : 0.0)));
      }
    }
  }

  void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWStep& h) override {
    const HostOpTimer op_timer = timed("adamw");
    check_same_shape(param, grad, "adamw");
    const double c1 = 1.0 - std::pow(double(h.beta1), h.step), c2 = 1.0 - std::pow(double(h.beta2), h.step);
    for (std::int64_t i = 0; i < param.numel(); ++i) {
      const double g = double(grad.data()[i]) * h.grad_scale;
      const double mi = double(h.beta1) * m.data()[i] + (1.0 - h.beta1) * g;
      const double vi = double(h.beta2) * v.data()[i] + (1.0 - h.beta2) * g * g;
      m.data()[i] = store(m, mi);
      v.data()[i] = store(v, vi);
      const double p = param.data()[i];
      param.data()[i] = store(param, p - double(h.lr) * ((mi / c1) / (std::sqrt(vi / c2) + h.eps) + double(h.weight_decay) * p));
    }
  }

 private:
  bool bf16() const { return precision_ == Precision::bf16; }
  /// An intermediate that a GPU implementation writes to memory in the activation type inside an
  /// op (attention's scores, dL/dprobs and dL/dscores in Megatron-LM's unfused path): rounded to
  /// bf16 under bf16, untouched under fp32.
  double materialised(double v) const { return bf16() ? double(kernels::round_bf16(float(v))) : v; }
  Tensor make(std::int64_t rows, std::int64_t cols, ElementType type) {
    FORESIGHT_CHECK(rows >= 0 && cols >= 0) << rows << "x" << cols;
    return Tensor(std::make_shared<HostBuffer>(std::size_t(rows * cols), usage_, device(), type), 0, rows, cols);
  }

  /// The profile's name of a GEMM call: the op (matmul, matmul_bias, matmul_bias_gelu,
  /// matmul_dgelu) and its transpose variant as the host profile names them (nn, nt, tn; tt for
  /// a call the trainer does not make).
  static std::string_view gemm_op_name(int op, bool ta, bool tb) {
    static constexpr const char* kNames[4][4] = {
        {"matmul_nn", "matmul_nt", "matmul_tn", "matmul_tt"},
        {"matmul_bias_nn", "matmul_bias_nt", "matmul_bias_tn", "matmul_bias_tt"},
        {"matmul_bias_gelu_nn", "matmul_bias_gelu_nt", "matmul_bias_gelu_tn", "matmul_bias_gelu_tt"},
        {"matmul_dgelu_nn", "matmul_dgelu_nt", "matmul_dgelu_tn", "matmul_dgelu_tt"}};
    return kNames[op][(ta ? 2 : 0) + (tb ? 1 : 0)];
  }
  HostOpTimer timed(std::string_view op) { return HostOpTimer(profiler_.get(), op); }

  bool staged_;
  Precision precision_;
  std::shared_ptr<Usage> usage_ = std::make_shared<Usage>();
  /// FORESIGHT_PROFILE_OPS: each op's host time, printed to stderr when the backend goes.
  std::unique_ptr<HostOpProfiler> profiler_ = op_profiling_requested() ? std::make_unique<HostOpProfiler>() : nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(Precision precision) { return std::make_unique<CpuBackend>(false, precision); }
std::unique_ptr<Backend> make_cpu_staged_backend(Precision precision) {
  return std::make_unique<CpuBackend>(true, precision);
}

}  // namespace foresight::trainer
