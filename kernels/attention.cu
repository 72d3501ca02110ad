// Causal attention, FlashAttention-2 structure (Dao 2023, Algorithms 1 and 2) on tensor cores:
// bf16 mma.sync m16n8k16 tiles with fp32 accumulation (sm_80 and later), operands staged in shared
// memory and read into fragments with ldmatrix.
//  - forward: a block of 4 warps takes 64 query rows of one (batch, head), 16 rows per warp, and
//    walks 64-key tiles up to the causal limit; S = Q K^T and O += P V are warp-level mma, the
//    online softmax runs on the accumulator fragments (a row's values live in the 4 lanes of a
//    quad). The probabilities go into the P V product as bf16 (as FlashAttention-2 does). Saves
//    lse = max + log(sum) per row (natural log).
//  - backward: rowsum(dO o) first; then dK, dV with a block per 64-key tile walking the query
//    tiles that see it (S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q), and dQ with a
//    block per 64-query tile walking key tiles (S, dP, dQ += dS K). Probabilities are recomputed
//    from lse; no atomics, so the result is deterministic (two passes instead of FlashAttention-2's
//    atomic dQ: 7 products instead of 5 in the backward).
// Layouts are strided (row strides ld_q, ld_kv, ld_o in elements), so that the trainer's packed
// qkv (N, 3*H*D) is read in place, and keys may outnumber queries (C >= T: a TeraPipe slice after
// C - T cached keys; query i sees keys 0 .. C - T + i).
// Mask convention (fragment coordinates): an accumulator c[4] of an m16n8 tile holds rows g and
// g + 8 (g = lane / 4), columns 2t and 2t + 1 (t = lane % 4): c0, c1 on row g, c2, c3 on row g + 8.
#include <cmath>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernels.hpp"

namespace foresight::kernels {

namespace {

using bfloat = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBM = 16 * kWarps;  // query rows per block (16 per warp)
constexpr int kBN = 64;           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared-memory rows are padded by 8 elements (16 bytes) so that ldmatrix's eight row addresses
// fall in different banks.
template <int D>
constexpr int kStride = D + 8;

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// c (16x8 fp32) += a (16x16 bf16, row) b (16x8 bf16, col).
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows r0 .. r0 + 63 of a (rows, D) matrix with row stride ld into a [64][D + 8] tile; rows at or
// beyond `rows` become zeros. 16-byte loads (the host checks the alignment).
template <int D>
__device__ __forceinline__ void load_tile(bfloat* tile, const bfloat* g, long ld, int r0, int rows) {
  constexpr int kVec = D / 8;
  for (int e = threadIdx.x; e < 64 * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) v = *reinterpret_cast<const uint4*>(g + long(r0 + r) * ld + c);
    *reinterpret_cast<uint4*>(tile + r * kStride<D> + c) = v;
  }
}

// The same tile through cp.async (16-byte copies global -> shared that bypass registers; rows at or
// beyond `rows` are zero-filled by a source size of 0, their address clamped to a valid row). The
// caller commits the group and waits for it (cp_async_wait) before a barrier.
template <int D>
__device__ __forceinline__ void load_tile_async(bfloat* tile, const bfloat* g, long ld, int r0, int rows) {
  constexpr int kVec = D / 8;
  for (int e = threadIdx.x; e < 64 * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 8;
    const bool in = r0 + r < rows;
    const bfloat* src = g + long(in ? r0 + r : rows - 1) * ld + c;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(tile + r * kStride<D> + c)),
                 "l"(src), "r"(in ? 16 : 0));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// s (16 x 64) = a (16 x D, this warp's rows of a tile) b (64 x D tile)^T.
template <int D>
__device__ __forceinline__ void warp_abt(float (&s)[8][4], const bfloat* a, const bfloat* b) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    std::uint32_t af[4];
    ldsm_x4(af, a + (lane % 16) * kStride<D> + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      std::uint32_t bf[4];
      ldsm_x4(bf, b + (nb * 16 + (lane % 8) + (lane / 16) * 8) * kStride<D> + kk * 16 + ((lane / 8) % 2) * 8);
      mma(s[2 * nb], af, bf[0], bf[1]);
      mma(s[2 * nb + 1], af, bf[2], bf[3]);
    }
  }
}

// o (16 x D) += p (16 x 64, fp32 fragments, rounded to bf16 here) b (64 x D tile).
template <int D>
__device__ __forceinline__ void warp_pb(float (&o)[D / 8][4], const float (&p)[8][4], const bfloat* b) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t a[4] = {dev::pack2(p[2 * j][0], p[2 * j][1]), dev::pack2(p[2 * j][2], p[2 * j][3]),
                                dev::pack2(p[2 * j + 1][0], p[2 * j + 1][1]),
                                dev::pack2(p[2 * j + 1][2], p[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      std::uint32_t bf[4];
      ldsm_x4_trans(bf, b + (j * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride<D> + dp * 16 + (lane / 16) * 8);
      mma(o[2 * dp], a, bf[0], bf[1]);
      mma(o[2 * dp + 1], a, bf[2], bf[3]);
    }
  }
}

// The key/value tile of the keys n0 .. n0 + 63 (loop iteration `it`, the last tile ending before
// `kend`), in shared memory and visible to every thread on return, for the kernels that walk key
// tiles (forward, dQ). The plain form: a barrier (the previous tile is consumed; on the first pass
// the caller's own tiles are written), both loads into Ks and Vs, a barrier. kPipe: K/V
// double-buffered through cp.async, slot `it % 2` (the second slot directly after Vs) holding this
// tile, whose group the caller's previous iteration (or its prologue, for the first) started; the
// next tile's copy is started into the other slot before waiting for this one. The caller ends each
// iteration with a barrier so that the following prefetch cannot overwrite a slot being read.
template <int D, bool kPipe>
__device__ __forceinline__ void kv_tile(const bfloat*& Kt, const bfloat*& Vt, bfloat* Ks, bfloat* Vs, const bfloat* kb,
                                        const bfloat* vb, long ld_kv, int n0, int it, int kend, int C) {
  if constexpr (kPipe) {
    bfloat* const K1 = Vs + kBN * kStride<D>;  // the second slot (ternaries, not an array:
    bfloat* const V1 = K1 + kBN * kStride<D>;  // a dynamically indexed array goes to local memory)
    const bool odd = it & 1;
    Kt = odd ? K1 : Ks;
    Vt = odd ? V1 : Vs;
    if (n0 + kBN < kend) {  // the next tile into the other slot, consumed by the last iteration
      load_tile_async<D>(odd ? Ks : K1, kb, ld_kv, n0 + kBN, C);
      load_tile_async<D>(odd ? Vs : V1, vb, ld_kv, n0 + kBN, C);
      cp_async_commit();
      cp_async_wait<1>();  // this tile's group (and the prologue's) has landed; the next may still fly
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
  } else {
    Kt = Ks;
    Vt = Vs;
    __syncthreads();
    load_tile<D>(Ks, kb, ld_kv, n0, C);
    load_tile<D>(Vs, vb, ld_kv, n0, C);
    __syncthreads();
  }
}

struct Geometry {
  int T, C, H;
  long ld_q, ld_kv, ld_o;
};

// kPipe: K/V tiles double-buffered through cp.async, the next tile's copy in flight while this
// one is computed (the plain form loads, waits at a barrier, computes).
template <int D, bool kPipe>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_kernel(const bfloat* q, const bfloat* k, const bfloat* v, bfloat* o, float* lse, Geometry g,
                    float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  bfloat* Qs = reinterpret_cast<bfloat*>(smem);
  bfloat* Ks = Qs + kBM * kStride<D>;
  bfloat* Vs = Ks + kBN * kStride<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const int b = blockIdx.y / g.H, h = blockIdx.y % g.H;
  // Longest first: query tile blockIdx.x counted from the end sees the most keys under the causal
  // mask, so the heavy blocks of every (batch, head) start in the first waves and the light ones
  // fill the tail (FlashAttention-3's longest-processing-time order for causal attention).
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBM, P = g.C - g.T;
  const bfloat* qb = q + long(b) * g.T * g.ld_q + long(h) * D;
  const bfloat* kb = k + long(b) * g.C * g.ld_kv + long(h) * D;
  const bfloat* vb = v + long(b) * g.C * g.ld_kv + long(h) * D;
  if constexpr (kPipe) {
    load_tile_async<D>(Qs, qb, g.ld_q, m0, g.T);
    load_tile_async<D>(Ks, kb, g.ld_kv, 0, g.C);
    load_tile_async<D>(Vs, vb, g.ld_kv, 0, g.C);
    cp_async_commit();
  } else {
    load_tile<D>(Qs, qb, g.ld_q, m0, g.T);
  }

  float acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  const int row[2] = {m0 + warp * 16 + gr, m0 + warp * 16 + gr + 8};
  const int kend = min(g.C, P + m0 + kBM);  // the block's last row sees keys 0 .. P + m0 + 63
  for (int n0 = 0, it = 0; n0 < kend; n0 += kBN, ++it) {
    const bfloat* Kt;
    const bfloat* Vt;
    kv_tile<D, kPipe>(Kt, Vt, Ks, Vs, kb, vb, g.ld_kv, n0, it, kend, g.C);
    float s[8][4];
    warp_abt<D>(s, Qs + warp * 16 * kStride<D>, Kt);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + nt * 8 + 2 * t + (e & 1), r = row[e / 2];
        s[nt][e] = (key <= P + r && key < g.C) ? s[nt][e] * scale_log2 : -INFINITY;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(mrow[half], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
      const float corr = exp2f(mrow[half] - base);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          s[nt][e] = exp2f(s[nt][e] - base);
          sum += s[nt][e];
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      lrow[half] = lrow[half] * corr + sum;
      mrow[half] = m_new;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        acc[d][2 * half] *= corr;
        acc[d][2 * half + 1] *= corr;
      }
    }
    warp_pb<D>(acc, s, Vt);
    if constexpr (kPipe) __syncthreads();  // the next iteration's prefetch refills this slot
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row[half];
    if (r >= g.T) continue;
    const float inv = lrow[half] > 0.0f ? 1.0f / lrow[half] : 0.0f;
    bfloat* orow = o + (long(b) * g.T + r) * g.ld_o + long(h) * D;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<std::uint32_t*>(orow + d * 8 + 2 * t) =
          dev::pack2(acc[d][2 * half] * inv, acc[d][2 * half + 1] * inv);
    if (t == 0)
      lse[(long(b) * g.H + h) * g.T + r] = lrow[half] > 0.0f ? (mrow[half] + log2f(lrow[half])) * kLn2 : -INFINITY;
  }
}

// delta[(b*H + h)*T + i] = sum_d dO[b, i, h, d] o[b, i, h, d] (the D term of the softmax gradient).
__global__ void attn_bwd_dot_kernel(const bfloat* o, const bfloat* dout, float* delta, Geometry g, int D, long rows) {
  const long idx = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (idx >= rows) return;
  const int i = int(idx % g.T);
  const long bh = idx / g.T;
  const int h = int(bh % g.H), b = int(bh / g.H);
  const long at = (long(b) * g.T + i) * g.ld_o + long(h) * D;
  float s = 0.0f;
  for (int d = 0; d < D; d += 2) {
    const std::uint32_t ow = *reinterpret_cast<const std::uint32_t*>(o + at + d);
    const std::uint32_t gw = *reinterpret_cast<const std::uint32_t*>(dout + at + d);
    s += dev::lo(ow) * dev::lo(gw) + dev::hi(ow) * dev::hi(gw);
  }
  delta[idx] = s;
}

// Stores a 16 x D fragment block (rows `row[2]`, fp32 accumulators times `scale`) into a strided
// bf16 matrix, adding what is there when `accumulate`; rows at or beyond `rows` are skipped.
template <int D>
__device__ __forceinline__ void store_rows(bfloat* base, long ld, const int (&row)[2], int rows,
                                           const float (&acc)[D / 8][4], float scale, bool accumulate) {
  const int t = (threadIdx.x & 31) % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (row[half] >= rows) continue;
    bfloat* p = base + long(row[half]) * ld;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      std::uint32_t* w = reinterpret_cast<std::uint32_t*>(p + d * 8 + 2 * t);
      float a = acc[d][2 * half] * scale, c = acc[d][2 * half + 1] * scale;
      if (accumulate) {
        const std::uint32_t old = *w;
        a += dev::lo(old);
        c += dev::hi(old);
      }
      *w = dev::pack2(a, c);
    }
  }
}

// kPipe: the query tiles (Q, dO, lse, delta) double-buffered through cp.async.
template <int D, bool kPipe>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dkdv_kernel(const bfloat* q, const bfloat* k, const bfloat* v, const bfloat* dout, const float* lse,
                         const float* delta, bfloat* dk, bfloat* dv, Geometry g, float scale, float scale_log2,
                         bool accumulate) {
  extern __shared__ __align__(16) unsigned char smem[];
  bfloat* Ks = reinterpret_cast<bfloat*>(smem);
  bfloat* Vs = Ks + kBN * kStride<D>;
  bfloat* Qs = Vs + kBN * kStride<D>;
  bfloat* Gs = Qs + kBM * kStride<D>;  // dO
  float* Ls = reinterpret_cast<float*>(Gs + kBM * kStride<D>);  // lse * log2(e) of the tile's queries
  float* Ds = Ls + kBM;                                          // delta of the tile's queries
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const int b = blockIdx.y / g.H, h = blockIdx.y % g.H;
  const int n0 = blockIdx.x * kBN, P = g.C - g.T;  // key tile 0 sees the most queries: longest first already
  const bfloat* qb = q + long(b) * g.T * g.ld_q + long(h) * D;
  const bfloat* gb = dout + long(b) * g.T * g.ld_o + long(h) * D;
  const bfloat* kb = k + long(b) * g.C * g.ld_kv + long(h) * D;
  const bfloat* vb = v + long(b) * g.C * g.ld_kv + long(h) * D;
  const float* lb = lse + (long(b) * g.H + h) * g.T;
  const float* db = delta + (long(b) * g.H + h) * g.T;
  // Pipelined layout after K and V: Q and dO of slot 0, Q and dO of slot 1, then lse and delta
  // of slot 0 and of slot 1 (pointers chosen by ternaries: an indexed array would live in local
  // memory).
  bfloat* const Q1 = Qs + 2 * kBM * kStride<D>;
  bfloat* const G1 = Gs + 2 * kBM * kStride<D>;
  float* const L0 = reinterpret_cast<float*>(Qs + 4 * kBM * kStride<D>);
  float* const L1 = L0 + kBM;
  float* const D0 = L0 + 2 * kBM;
  float* const D1 = L0 + 3 * kBM;
  // Stages query tile m into slot `sl`: Q and dO by cp.async, lse and delta by plain stores.
  [[maybe_unused]] auto stage = [&](bool sl, int m) {
    load_tile_async<D>(sl ? Q1 : Qs, qb, g.ld_q, m, g.T);
    load_tile_async<D>(sl ? G1 : Gs, gb, g.ld_o, m, g.T);
    cp_async_commit();
    float* const lt = sl ? L1 : L0;
    float* const dt = sl ? D1 : D0;
    for (int r = threadIdx.x; r < kBM; r += kThreads) {
      const bool in = m + r < g.T;
      lt[r] = in ? lb[m + r] * kLog2e : 0.0f;
      dt[r] = in ? db[m + r] : 0.0f;
    }
  };
  const int first = max(0, n0 - P);  // the first query that sees a key of this tile
  if constexpr (kPipe) {
    load_tile_async<D>(Ks, kb, g.ld_kv, n0, g.C);
    load_tile_async<D>(Vs, vb, g.ld_kv, n0, g.C);
    cp_async_commit();
    if (first / kBM * kBM < g.T) stage(false, first / kBM * kBM);
  } else {
    load_tile<D>(Ks, kb, g.ld_kv, n0, g.C);
    load_tile<D>(Vs, vb, g.ld_kv, n0, g.C);
  }

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[d][e] = dv_acc[d][e] = 0.0f;
  const int key[2] = {n0 + warp * 16 + gr, n0 + warp * 16 + gr + 8};
  for (int m0 = first / kBM * kBM, it = 0; m0 < g.T; m0 += kBM, ++it) {
    const bfloat* Qt = Qs;
    const bfloat* Gt = Gs;
    const float* Lt = Ls;
    const float* Dt = Ds;
    if constexpr (kPipe) {
      const bool odd = it & 1;
      Qt = odd ? Q1 : Qs;
      Gt = odd ? G1 : Gs;
      Lt = odd ? L1 : L0;
      Dt = odd ? D1 : D0;
      if (m0 + kBM < g.T) {
        stage(!odd, m0 + kBM);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    } else {
      __syncthreads();  // the previous query tile is consumed
      load_tile<D>(Qs, qb, g.ld_q, m0, g.T);
      load_tile<D>(Gs, gb, g.ld_o, m0, g.T);
      for (int r = threadIdx.x; r < kBM; r += kThreads) {
        const bool in = m0 + r < g.T;
        Ls[r] = in ? lb[m0 + r] * kLog2e : 0.0f;
        Ds[r] = in ? db[m0 + r] : 0.0f;
      }
      __syncthreads();
    }
    float p[8][4], ds[8][4];
    warp_abt<D>(p, Ks + warp * 16 * kStride<D>, Qt);  // S^T: rows keys, columns queries
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = nt * 8 + 2 * t + (e & 1), qi = m0 + qc, kr = key[e / 2];
        p[nt][e] = (qi < g.T && kr <= P + qi && kr < g.C) ? exp2f(p[nt][e] * scale_log2 - Lt[qc]) : 0.0f;
      }
    warp_abt<D>(ds, Vs + warp * 16 * kStride<D>, Gt);  // dP^T = V dO^T
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - Dt[nt * 8 + 2 * t + (e & 1)]);
    warp_pb<D>(dv_acc, p, Gt);   // dV += P^T dO
    warp_pb<D>(dk_acc, ds, Qt);  // dK += dS^T Q (times scale at the store)
    if constexpr (kPipe) __syncthreads();  // the next iteration's prefetch refills this slot
  }
  if constexpr (kPipe) cp_async_wait<0>();  // a tile no query sees still had its K/V group in flight
  store_rows<D>(dk + long(b) * g.C * g.ld_kv + long(h) * D, g.ld_kv, key, g.C, dk_acc, scale, accumulate);
  store_rows<D>(dv + long(b) * g.C * g.ld_kv + long(h) * D, g.ld_kv, key, g.C, dv_acc, 1.0f, accumulate);
}

// kPipe: K/V tiles double-buffered through cp.async, as the forward.
template <int D, bool kPipe>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_dq_kernel(const bfloat* q, const bfloat* k, const bfloat* v, const bfloat* dout, const float* lse,
                       const float* delta, bfloat* dq, Geometry g, float scale, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  bfloat* Qs = reinterpret_cast<bfloat*>(smem);
  bfloat* Gs = Qs + kBM * kStride<D>;
  bfloat* Ks = Gs + kBM * kStride<D>;
  bfloat* Vs = Ks + kBN * kStride<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const int b = blockIdx.y / g.H, h = blockIdx.y % g.H;
  // Longest first: query tile blockIdx.x counted from the end sees the most keys under the causal
  // mask, so the heavy blocks of every (batch, head) start in the first waves and the light ones
  // fill the tail (FlashAttention-3's longest-processing-time order for causal attention).
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBM, P = g.C - g.T;
  const bfloat* kb = k + long(b) * g.C * g.ld_kv + long(h) * D;
  const bfloat* vb = v + long(b) * g.C * g.ld_kv + long(h) * D;
  if constexpr (kPipe) {
    load_tile_async<D>(Qs, q + long(b) * g.T * g.ld_q + long(h) * D, g.ld_q, m0, g.T);
    load_tile_async<D>(Gs, dout + long(b) * g.T * g.ld_o + long(h) * D, g.ld_o, m0, g.T);
    load_tile_async<D>(Ks, kb, g.ld_kv, 0, g.C);
    load_tile_async<D>(Vs, vb, g.ld_kv, 0, g.C);
    cp_async_commit();
  } else {
    load_tile<D>(Qs, q + long(b) * g.T * g.ld_q + long(h) * D, g.ld_q, m0, g.T);
    load_tile<D>(Gs, dout + long(b) * g.T * g.ld_o + long(h) * D, g.ld_o, m0, g.T);
  }
  const int row[2] = {m0 + warp * 16 + gr, m0 + warp * 16 + gr + 8};
  float l2[2], dl[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool in = row[half] < g.T;
    l2[half] = in ? lse[(long(b) * g.H + h) * g.T + row[half]] * kLog2e : 0.0f;
    dl[half] = in ? delta[(long(b) * g.H + h) * g.T + row[half]] : 0.0f;
  }
  float acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;
  const int kend = min(g.C, P + m0 + kBM);
  for (int n0 = 0, it = 0; n0 < kend; n0 += kBN, ++it) {
    const bfloat* Kt;
    const bfloat* Vt;
    kv_tile<D, kPipe>(Kt, Vt, Ks, Vs, kb, vb, g.ld_kv, n0, it, kend, g.C);
    float p[8][4], ds[8][4];
    warp_abt<D>(p, Qs + warp * 16 * kStride<D>, Kt);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kc = n0 + nt * 8 + 2 * t + (e & 1), r = row[e / 2];
        p[nt][e] = (r < g.T && kc <= P + r && kc < g.C) ? exp2f(p[nt][e] * scale_log2 - l2[e / 2]) : 0.0f;
      }
    warp_abt<D>(ds, Gs + warp * 16 * kStride<D>, Vt);  // dP = dO V^T
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - dl[e / 2]);
    warp_pb<D>(acc, ds, Kt);  // dQ += dS K (times scale at the store)
    if constexpr (kPipe) __syncthreads();  // the next iteration's prefetch refills this slot
  }
  store_rows<D>(dq + long(b) * g.T * g.ld_q + long(h) * D, g.ld_q, row, g.T, acc, scale, false);
}

float scale_of(const AttentionShape& s) { return s.scale != 0 ? s.scale : 1.0f / std::sqrt(float(s.D)); }

Geometry geometry_of(const AttentionShape& s) {
  const long hd = long(s.H) * s.D;
  return {s.T, s.C > 0 ? s.C : s.T, s.H, s.ld_q > 0 ? s.ld_q : hd, s.ld_kv > 0 ? s.ld_kv : hd, s.ld_o > 0 ? s.ld_o : hd};
}

void check_shape(const AttentionShape& s, const char* who) {
  detail::require(s.B > 0 && s.T > 0 && s.H > 0, std::string(who) + ": B, T, H must be positive");
  detail::require(s.D == 32 || s.D == 64 || s.D == 128, std::string(who) + ": head dim must be 32, 64 or 128");
  detail::require(long(s.B) * s.H <= 65535, std::string(who) + ": B * H must be at most 65535");
  detail::require(s.C == 0 || s.C >= s.T, std::string(who) + ": keys C must be 0 (= T) or at least T");
  const Geometry g = geometry_of(s);
  const long hd = long(s.H) * s.D;
  detail::require(g.ld_q >= hd && g.ld_kv >= hd && g.ld_o >= hd,
                  std::string(who) + ": a row stride is shorter than H * D");
  detail::require(g.ld_q % 8 == 0 && g.ld_kv % 8 == 0 && g.ld_o % 8 == 0,
                  std::string(who) + ": row strides must be multiples of 8 elements (16-byte loads)");
}
void check_aligned(std::initializer_list<const void*> ps, const char* who) {
  for (const void* p : ps)
    detail::require(dev::aligned16(p), std::string(who) + ": tensors must be 16-byte aligned");
}

// Shared memory per block; the pipelined forms hold two slots of the tiles they stream.
template <int D, bool kPipe>
constexpr int fwd_smem() {
  return (kBM + (kPipe ? 4 : 2) * kBN) * kStride<D> * int(sizeof(bfloat));
}
template <int D, bool kPipe>
constexpr int dkdv_smem() {
  return (2 * kBN + (kPipe ? 4 : 2) * kBM) * kStride<D> * int(sizeof(bfloat)) +
         (kPipe ? 4 : 2) * kBM * int(sizeof(float));
}
template <int D, bool kPipe>
constexpr int dq_smem() {
  return (2 * kBM + (kPipe ? 4 : 2) * kBN) * kStride<D> * int(sizeof(bfloat));
}

template <int D, bool kPipe>
void forward_d(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
               cudaStream_t stream) {
  const Geometry g = geometry_of(s);
  constexpr int smem = fwd_smem<D, kPipe>();
  FORESIGHT_CUDA(cudaFuncSetAttribute(attn_fwd_kernel<D, kPipe>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(dev::blocks_for(s.T, kBM), s.B * s.H);
  attn_fwd_kernel<D, kPipe><<<grid, kThreads, smem, stream>>>(dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(o), lse, g,
                                                              scale_of(s) * kLog2e);
  FORESIGHT_CUDA_LAUNCHED("attention_forward");
}

template <int D, bool kPipe>
void backward_d(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                bf16* dq, bf16* dk, bf16* dv, float* delta, const AttentionShape& s, cudaStream_t stream) {
  const Geometry g = geometry_of(s);
  const long rows = long(s.B) * s.H * s.T;
  attn_bwd_dot_kernel<<<dev::blocks_for(rows, 256), 256, 0, stream>>>(dev::cu(o), dev::cu(dout), delta, g, D, rows);
  FORESIGHT_CUDA_LAUNCHED("attention_backward rowsum");
  const float scale = scale_of(s);
  constexpr int kv_smem = dkdv_smem<D, kPipe>(), q_smem = dq_smem<D, kPipe>();
  FORESIGHT_CUDA(
      cudaFuncSetAttribute(attn_bwd_dkdv_kernel<D, kPipe>, cudaFuncAttributeMaxDynamicSharedMemorySize, kv_smem));
  const dim3 kgrid(dev::blocks_for(g.C, kBN), s.B * s.H);
  attn_bwd_dkdv_kernel<D, kPipe><<<kgrid, kThreads, kv_smem, stream>>>(
      dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(dout), lse, delta, dev::cu(dk), dev::cu(dv), g, scale,
      scale * kLog2e, s.accumulate_dkv);
  FORESIGHT_CUDA_LAUNCHED("attention_backward dk dv");
  FORESIGHT_CUDA(cudaFuncSetAttribute(attn_bwd_dq_kernel<D, kPipe>, cudaFuncAttributeMaxDynamicSharedMemorySize, q_smem));
  const dim3 qgrid(dev::blocks_for(s.T, kBM), s.B * s.H);
  attn_bwd_dq_kernel<D, kPipe><<<qgrid, kThreads, q_smem, stream>>>(dev::cu(q), dev::cu(k), dev::cu(v), dev::cu(dout),
                                                                     lse, delta, dev::cu(dq), g, scale, scale * kLog2e);
  FORESIGHT_CUDA_LAUNCHED("attention_backward dq");
}

template <int D>
void forward_p(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
               cudaStream_t stream) {
  if (s.pipelined)
    forward_d<D, true>(q, k, v, o, lse, s, stream);
  else
    forward_d<D, false>(q, k, v, o, lse, s, stream);
}
template <int D>
void backward_p(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                bf16* dq, bf16* dk, bf16* dv, float* delta, const AttentionShape& s, cudaStream_t stream) {
  if (s.pipelined)
    backward_d<D, true>(q, k, v, o, dout, lse, dq, dk, dv, delta, s, stream);
  else
    backward_d<D, false>(q, k, v, o, dout, lse, dq, dk, dv, delta, s, stream);
}

}  // namespace

bool attention_supports(const AttentionShape& s) {
  if (s.B <= 0 || s.T <= 0 || s.H <= 0 || (s.D != 32 && s.D != 64 && s.D != 128) || long(s.B) * s.H > 65535)
    return false;
  if (s.C != 0 && s.C < s.T) return false;
  const Geometry g = geometry_of(s);
  const long hd = long(s.H) * s.D;
  return g.ld_q >= hd && g.ld_kv >= hd && g.ld_o >= hd && g.ld_q % 8 == 0 && g.ld_kv % 8 == 0 && g.ld_o % 8 == 0;
}

void attention_forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, const AttentionShape& s,
                       cudaStream_t stream) {
  check_shape(s, "attention_forward");
  check_aligned({q, k, v, o}, "attention_forward");
  switch (s.D) {
    case 32: return forward_p<32>(q, k, v, o, lse, s, stream);
    case 64: return forward_p<64>(q, k, v, o, lse, s, stream);
    default: return forward_p<128>(q, k, v, o, lse, s, stream);
  }
}

std::size_t attention_backward_workspace_bytes(const AttentionShape& s) {
  return std::size_t(s.B) * s.H * s.T * sizeof(float);
}

void attention_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout, const float* lse,
                        bf16* dq, bf16* dk, bf16* dv, void* workspace, const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "attention_backward");
  check_aligned({q, k, v, o, dout, dq, dk, dv}, "attention_backward");
  detail::require(workspace != nullptr, "attention_backward: needs attention_backward_workspace_bytes of workspace");
  float* delta = static_cast<float*>(workspace);
  switch (s.D) {
    case 32: return backward_p<32>(q, k, v, o, dout, lse, dq, dk, dv, delta, s, stream);
    case 64: return backward_p<64>(q, k, v, o, dout, lse, dq, dk, dv, delta, s, stream);
    default: return backward_p<128>(q, k, v, o, dout, lse, dq, dk, dv, delta, s, stream);
  }
}

}  // namespace foresight::kernels
