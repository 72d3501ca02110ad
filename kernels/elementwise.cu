// Elementwise bf16 kernels (GeLU forward/backward, residual add, casts) and the bias gradient.
// Memory-bound: each thread moves 16 bytes per operand (8 bf16) when every pointer is 16-byte
// aligned, the rest (and unaligned calls) go through a scalar kernel. Math in fp32.
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

using dev::hi;
using dev::lo;
using dev::pack2;

struct GeluFwd {
  __device__ float operator()(float x, float) const { return dev::gelu(x); }
};
struct GeluBwd {  // a = x, b = dy
  __device__ float operator()(float x, float dy) const { return dy * dev::gelu_grad(x); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// out[i] = f(a[i], b[i]) over n8 groups of 8; b may be null (unary ops ignore their second input).
template <class F>
__global__ void map_vec8(const uint4* a, const uint4* b, uint4* out, long n8, F f) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const uint4 va = a[i];
  const uint4 vb = b ? b[i] : make_uint4(0, 0, 0, 0);
  uint4 r;
  r.x = pack2(f(lo(va.x), lo(vb.x)), f(hi(va.x), hi(vb.x)));
  r.y = pack2(f(lo(va.y), lo(vb.y)), f(hi(va.y), hi(vb.y)));
  r.z = pack2(f(lo(va.z), lo(vb.z)), f(hi(va.z), hi(vb.z)));
  r.w = pack2(f(lo(va.w), lo(vb.w)), f(hi(va.w), hi(vb.w)));
  out[i] = r;
}

template <class F>
__global__ void map_scalar(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, long begin, long n, F f) {
  const long i = begin + long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = dev::to_b(f(dev::to_f(a[i]), b ? dev::to_f(b[i]) : 0.0f));
}

template <class F>
void launch_map(const bf16* a, const bf16* b, bf16* out, long n, F f, cudaStream_t stream, const char* name) {
  detail::require(n >= 0, std::string(name) + ": n must be non-negative");
  if (n == 0) return;
  constexpr int kThreads = 256;
  long done = 0;
  if (dev::aligned16(a) && dev::aligned16(out) && (!b || dev::aligned16(b))) {
    const long n8 = n / 8;
    if (n8 > 0) {
      map_vec8<<<dev::blocks_for(n8, kThreads), kThreads, 0, stream>>>(
          reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b), reinterpret_cast<uint4*>(out), n8, f);
      FORESIGHT_CUDA_LAUNCHED(name);
    }
    done = n8 * 8;
  }
  if (done < n) {
    map_scalar<<<dev::blocks_for(n - done, kThreads), kThreads, 0, stream>>>(dev::cu(a), b ? dev::cu(b) : nullptr,
                                                                           dev::cu(out), done, n, f);
    FORESIGHT_CUDA_LAUNCHED(name);
  }
}

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = dev::to_b(x[i]);
}
__global__ void to_float_kernel(const __nv_bfloat16* x, float* y, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = dev::to_f(x[i]);
}

// One thread per column over a chunk of kRows rows; chunks meet in fp32 atomics on db.
constexpr int kBiasRows = 128;
__global__ void bias_grad_kernel(const __nv_bfloat16* dy, float* db, int m, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int r0 = blockIdx.y * kBiasRows;
  const int r1 = min(m, r0 + kBiasRows);
  float s = 0;
  for (int r = r0; r < r1; ++r) s += dev::to_f(dy[long(r) * n + j]);
  atomicAdd(db + j, s);
}

}  // namespace

void gelu_forward(const bf16* x, bf16* y, long n, cudaStream_t stream) {
  launch_map(x, nullptr, y, n, GeluFwd{}, stream, "gelu_forward");
}

void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, long n, cudaStream_t stream) {
  launch_map(x, dy, dx, n, GeluBwd{}, stream, "gelu_backward");
}

void residual_add(const bf16* a, const bf16* b, bf16* out, long n, cudaStream_t stream) {
  launch_map(a, b, out, n, Add{}, stream, "residual_add");
}

void cast_to_bf16(const float* x, bf16* y, long n, cudaStream_t stream) {
  if (n <= 0) return;
  to_bf16_kernel<<<dev::blocks_for(n, 256), 256, 0, stream>>>(x, dev::cu(y), n);
  FORESIGHT_CUDA_LAUNCHED("cast_to_bf16");
}

void cast_to_float(const bf16* x, float* y, long n, cudaStream_t stream) {
  if (n <= 0) return;
  to_float_kernel<<<dev::blocks_for(n, 256), 256, 0, stream>>>(dev::cu(x), y, n);
  FORESIGHT_CUDA_LAUNCHED("cast_to_float");
}

void bias_grad(const bf16* dy, float* db, int m, int n, cudaStream_t stream) {
  detail::require(m > 0 && n > 0, "bias_grad: m and n must be positive");
  const dim3 grid(dev::blocks_for(n, 256), dev::blocks_for(m, kBiasRows));
  detail::require(grid.y <= 65535u, "bias_grad: m too large");
  bias_grad_kernel<<<grid, 256, 0, stream>>>(dev::cu(dy), db, m, n);
  FORESIGHT_CUDA_LAUNCHED("bias_grad");
}

}  // namespace foresight::kernels
