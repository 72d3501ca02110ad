// Token + position embedding lookup and its scatter-add backward. Forward: one thread per output
// element (coalesced along C). Backward: fp32 atomics into the (V, C) and (T, C) gradients, since
// tokens repeat; llm.c sorts tokens to avoid them, which is a later optimisation.
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

__global__ void embedding_fwd_kernel(const int* tokens, const __nv_bfloat16* wte, const __nv_bfloat16* wpe,
                                     __nv_bfloat16* out, int T, int C, int V, long total) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long row = i / C;
  const int c = int(i % C), t = int(row % T);
  const int tok = tokens[row];
  float v = 0;
  if (tok >= 0 && tok < V) {
    v = dev::to_f(wte[long(tok) * C + c]);
    if (wpe) v += dev::to_f(wpe[long(t) * C + c]);
  }
  out[i] = dev::to_b(v);
}

__global__ void embedding_bwd_kernel(const int* tokens, const __nv_bfloat16* dout, float* dwte, float* dwpe, int T, int C,
                                     int V, long total) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long row = i / C;
  const int c = int(i % C), t = int(row % T);
  const int tok = tokens[row];
  if (tok < 0 || tok >= V) return;
  const float g = dev::to_f(dout[i]);
  atomicAdd(dwte + long(tok) * C + c, g);
  if (dwpe) atomicAdd(dwpe + long(t) * C + c, g);
}

}  // namespace

void embedding_forward(const std::int32_t* tokens, const bf16* wte, const bf16* wpe, bf16* out, int B, int T, int C,
                       int V, cudaStream_t stream) {
  detail::require(B > 0 && T > 0 && C > 0 && V > 0, "embedding_forward: sizes must be positive");
  const long total = long(B) * T * C;
  embedding_fwd_kernel<<<dev::blocks_for(total, 256), 256, 0, stream>>>(tokens, dev::cu(wte),
                                                                        wpe ? dev::cu(wpe) : nullptr, dev::cu(out), T,
                                                                        C, V, total);
  FORESIGHT_CUDA_LAUNCHED("embedding_forward");
}

void embedding_backward(const std::int32_t* tokens, const bf16* dout, float* dwte, float* dwpe, int B, int T, int C,
                        int V, cudaStream_t stream) {
  detail::require(B > 0 && T > 0 && C > 0 && V > 0, "embedding_backward: sizes must be positive");
  const long total = long(B) * T * C;
  embedding_bwd_kernel<<<dev::blocks_for(total, 256), 256, 0, stream>>>(tokens, dev::cu(dout), dwte, dwpe, T, C, V,
                                                                        total);
  FORESIGHT_CUDA_LAUNCHED("embedding_backward");
}

}  // namespace foresight::kernels
