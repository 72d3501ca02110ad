// cuBLASLt GEMMs (every transpose, epilogue, output dtype, batch) and causal attention forward and
// backward against the CPU twins, on random bf16 inputs, outputs poisoned before each launch.
#include <cmath>
#include <cstdint>

#include "kernels/reference.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace foresight::kernels::gputest {
namespace {

struct GemmCase {
  int m, n, k;
  bool ta, tb;
  int batch;
  Epilogue epi;
};

class GemmGpu : public Gpu {};

TEST_F(GemmGpu, Bf16OutputAllTransposesAndEpilogues) {
  BlasContext ctx;
  const GemmCase cases[] = {
      {128, 96, 64, false, false, 1, Epilogue::none},     {128, 96, 64, false, true, 1, Epilogue::bias},
      {257, 129, 65, true, false, 1, Epilogue::gelu},     {257, 129, 65, true, true, 1, Epilogue::bias_gelu},
      {64, 512, 1024, false, true, 1, Epilogue::bias_gelu}, {33, 40, 48, false, false, 3, Epilogue::none},
      {200, 72, 16, true, true, 4, Epilogue::none},
  };
  unsigned seed = 100;
  for (const auto& c : cases) {
    const GemmDims d{.m = c.m, .n = c.n, .k = c.k, .trans_a = c.ta, .trans_b = c.tb, .batch = c.batch};
    auto A = randn(std::size_t(c.batch) * c.m * c.k, ++seed), B = randn(std::size_t(c.batch) * c.k * c.n, ++seed);
    auto bias = randn(c.n, ++seed);
    const auto Ab = to_bf16_inplace(A), Bb = to_bf16_inplace(B), biasb = to_bf16_inplace(bias);
    std::vector<float> want(std::size_t(c.batch) * c.m * c.n);
    ref::gemm(A.data(), B.data(), want.data(), d, bias.data(), c.epi);
    DevBuf<bf16> dA(Ab), dB(Bb), dbias(biasb), dC(want.size());
    dC.poison();
    gemm(ctx, dA.get(), dB.get(), dC.get(), dbias.get(), d, c.epi, 1.0f, 0.0f, stream);
    sync();
    expect_close("gemm bf16 m" + std::to_string(c.m) + " n" + std::to_string(c.n) + " k" + std::to_string(c.k) + " ta" +
                     std::to_string(c.ta) + " tb" + std::to_string(c.tb) + " b" + std::to_string(c.batch) + " epi" +
                     std::to_string(int(c.epi)),
                 dC.download(), want, kTolBf16);
  }
}

// Views as the trainer passes them: A's rows 2-byte aligned inside a wider buffer, C written into
// the middle of a wider one (the elements around it must stay as they were), against the CPU twin
// with the same leading dimensions. A bias that is not 16-byte aligned: try_gemm declines and
// leaves C alone, gemm throws.
TEST_F(GemmGpu, ViewsAtAnyAlignment) {
  BlasContext ctx;
  const int m = 96, n = 72, k = 40, lda = k + 3, ldc = n + 5;
  auto A = randn(std::size_t(m) * lda + 1, 21), B = randn(std::size_t(n) * k, 22), bias = randn(n + 8, 23);
  const auto Ab = to_bf16_inplace(A), Bb = to_bf16_inplace(B), biasb = to_bf16_inplace(bias);
  const GemmDims d{.m = m, .n = n, .k = k, .trans_b = true, .lda = lda, .ldc = ldc};
  std::vector<float> want(std::size_t(m) * ldc + 3, 0.5f);
  ref::gemm(A.data() + 1, B.data(), want.data() + 3, d, bias.data() + 8, Epilogue::bias);
  DevBuf<bf16> dA(Ab), dB(Bb), dbias(biasb);
  DevBuf<float> dC(std::vector<float>(want.size(), 0.5f));
  gemm(ctx, dA.get() + 1, dB.get(), dC.get() + 3, static_cast<const float*>(nullptr), d, Epilogue::none, 1.0f,
       0.0f, stream);
  sync();
  std::vector<float> want_plain(want.size(), 0.5f);
  ref::gemm(A.data() + 1, B.data(), want_plain.data() + 3, d, nullptr, Epilogue::none);
  expect_close("gemm fp32 C, A 2-byte aligned, lda 43, ldc 77", dC.download(), want_plain, kTolF32);

  DevBuf<bf16> dC16(std::vector<bf16>(want.size(), to_bf16(0.5f)));
  ASSERT_TRUE(try_gemm(ctx, dA.get() + 1, dB.get(), dC16.get() + 3, dbias.get() + 8, d, Epilogue::bias, 1.0f, 0.0f,
                       stream));
  sync();
  expect_close("gemm bf16 C + bias, A 2-byte aligned, C 6-byte aligned", dC16.download(), want, kTolBf16);

  DevBuf<bf16> dC2(std::vector<bf16>(want.size(), to_bf16(0.5f)));
  EXPECT_FALSE(try_gemm(ctx, dA.get() + 1, dB.get(), dC2.get() + 3, dbias.get() + 1, d, Epilogue::bias, 1.0f, 0.0f,
                        stream));
  sync();
  for (const bf16 v : dC2.download()) ASSERT_EQ(v.bits, to_bf16(0.5f).bits) << "a declined GEMM wrote into C";
  EXPECT_THROW(gemm(ctx, dA.get() + 1, dB.get(), dC2.get() + 3, dbias.get() + 1, d, Epilogue::bias, 1.0f, 0.0f, stream),
               CudaError);
}

// The GeLU epilogues with an aux matrix, against the CPU twin: GELU_AUX_BIAS writes the GeLU and
// the pre-activation; DGELU reads that pre-activation back. Then the refusals: an aux matrix at a
// 2-byte offset, and an ldc that is not a multiple of 8.
TEST_F(GemmGpu, GeluAuxAndDgeluEpilogues) {
  BlasContext ctx;
  const int m = 64, k = 48, n = 96;
  auto x = randn(std::size_t(m) * k, 31), w = randn(std::size_t(n) * k, 32), bias = randn(n, 33);
  const auto xb = to_bf16_inplace(x), wb = to_bf16_inplace(w), biasb = to_bf16_inplace(bias);
  const GemmDims d{.m = m, .n = n, .k = k, .trans_b = true};
  std::vector<float> want_y(std::size_t(m) * n), want_pre(want_y.size());
  ref::gemm(x.data(), w.data(), want_y.data(), d, bias.data(), Epilogue::bias_gelu_aux, 1.0f, 0.0f, want_pre.data());
  DevBuf<bf16> dx(xb), dw(wb), dbias(biasb), dy(want_y.size()), dpre(want_y.size() + 8);
  dy.poison();
  dpre.poison();
  ASSERT_TRUE(try_gemm_aux(ctx, dx.get(), dw.get(), dy.get(), dbias.get(), dpre.get(), d, Epilogue::bias_gelu_aux, stream));
  sync();
  expect_close("gemm bias_gelu_aux: the GeLU", dy.download(), want_y, kTolBf16);
  std::vector<bf16> pre = dpre.download();
  pre.resize(want_pre.size());
  expect_close("gemm bias_gelu_aux: the pre-activation", pre, want_pre, kTolBf16);

  // dgelu: d (m, k) = g (m, n) w (n, k) * gelu'(aux), aux (m, k) the bf16 values cuBLASLt reads.
  auto g = randn(std::size_t(m) * n, 34), aux = randn(std::size_t(m) * k, 35);
  const auto gb = to_bf16_inplace(g), auxb = to_bf16_inplace(aux);
  const GemmDims dd{.m = m, .n = k, .k = n};
  std::vector<float> want_d(std::size_t(m) * k);
  ref::gemm(g.data(), w.data(), want_d.data(), dd, nullptr, Epilogue::dgelu, 1.0f, 0.0f, aux.data());
  DevBuf<bf16> dg(gb), daux(auxb), dd_out(want_d.size());
  dd_out.poison();
  ASSERT_TRUE(try_gemm_aux(ctx, dg.get(), dw.get(), dd_out.get(), nullptr, daux.get(), dd, Epilogue::dgelu, stream));
  sync();
  expect_close("gemm dgelu", dd_out.download(), want_d, kTolBf16);

  EXPECT_FALSE(try_gemm_aux(ctx, dx.get(), dw.get(), dy.get(), dbias.get(), dpre.get() + 1, d, Epilogue::bias_gelu_aux,
                            stream));
  const GemmDims odd{.m = m, .n = n - 1, .k = k, .trans_b = true};  // ldc 95
  EXPECT_FALSE(try_gemm_aux(ctx, dx.get(), dw.get(), dy.get(), dbias.get(), dpre.get(), odd, Epilogue::bias_gelu_aux,
                            stream));
}

TEST_F(GemmGpu, Fp32OutputAccumulatesWithBeta) {
  // A weight gradient dW (out, in) += dy^T x: trans_a, m = out, n = in, k = tokens, beta = 1.
  BlasContext ctx;
  const int tokens = 300, in = 96, out = 80;
  auto dy = randn(std::size_t(tokens) * out, 7), x = randn(std::size_t(tokens) * in, 8);
  auto w0 = randn(std::size_t(out) * in, 9);
  const auto dyb = to_bf16_inplace(dy), xb = to_bf16_inplace(x);
  const GemmDims d{.m = out, .n = in, .k = tokens, .trans_a = true};
  std::vector<float> want = w0;
  ref::gemm(dy.data(), x.data(), want.data(), d, nullptr, Epilogue::none, 1.0f, 1.0f);
  DevBuf<bf16> ddy(dyb), dx(xb);
  DevBuf<float> dw(w0);  // accumulated into: starts from w0, not poison
  gemm(ctx, ddy.get(), dx.get(), dw.get(), static_cast<const float*>(nullptr), d, Epilogue::none, 1.0f, 1.0f, stream);
  sync();
  expect_close("gemm fp32 out, beta 1 (weight grad)", dw.download(), want, kTolF32);
  // fp32 bias epilogue (router logits with a bias).
  auto bias = randn(in, 10);
  std::vector<float> want2(std::size_t(out) * in);
  ref::gemm(dy.data(), x.data(), want2.data(), d, bias.data(), Epilogue::bias);
  DevBuf<float> dbias(bias), dc(want2.size());
  dc.poison();
  gemm(ctx, ddy.get(), dx.get(), dc.get(), dbias.get(), d, Epilogue::bias, 1.0f, 0.0f, stream);
  sync();
  expect_close("gemm fp32 out, bias epilogue", dc.download(), want2, kTolF32);
}

TEST_F(GemmGpu, ExpertGemmAndBiasGrad) {
  BlasContext ctx;
  const int E = 4, cap = 24, in = 64, out = 48;
  auto x = randn(std::size_t(E) * cap * in, 11), w = randn(std::size_t(E) * out * in, 12);
  const auto xb = to_bf16_inplace(x), wb = to_bf16_inplace(w);
  std::vector<float> want(std::size_t(E) * cap * out);
  ref::gemm(x.data(), w.data(), want.data(), {.m = cap, .n = out, .k = in, .trans_b = true, .batch = E}, nullptr,
            Epilogue::none);
  DevBuf<bf16> dx(xb), dw(wb), dout(want.size());
  dout.poison();
  expert_gemm(ctx, dx.get(), dw.get(), dout.get(), E, cap, in, out, stream);
  sync();
  expect_close("expert_gemm (4 experts, capacity 24)", dout.download(), want, kTolBf16);

  const int m = 1000, n = 333;
  auto dy = randn(std::size_t(m) * n, 13);
  const auto dyb = to_bf16_inplace(dy);
  auto db0 = randn(n, 14);
  std::vector<float> wantdb = db0;
  ref::bias_grad(dy.data(), wantdb.data(), m, n);
  DevBuf<bf16> ddy(dyb);
  DevBuf<float> ddb(db0);
  bias_grad(ddy.get(), ddb.get(), m, n, stream);
  sync();
  expect_close("bias_grad (+=)", ddb.download(), wantdb, kTolF32);
}

class AttentionGpu : public Gpu {};

TEST_F(AttentionGpu, ForwardAndBackwardMatchReference) {
  for (const bool pipelined : {false, true})
  for (int D : {32, 64, 128}) {
    const AttentionShape s{.B = 2, .T = 203, .H = 3, .D = D, .pipelined = pipelined};
    const float scale = 1.0f / std::sqrt(float(D));
    const std::size_t n = std::size_t(s.B) * s.T * s.H * D, nstat = std::size_t(s.B) * s.H * s.T;
    auto q = randn(n, 20 + D), k = randn(n, 21 + D), v = randn(n, 22 + D), dout = randn(n, 23 + D);
    const auto qb = to_bf16_inplace(q), kb = to_bf16_inplace(k), vb = to_bf16_inplace(v), dob = to_bf16_inplace(dout);
    std::vector<float> o(n), lse(nstat);
    ref::attention_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), s.B, s.T, s.H, D, scale);
    DevBuf<bf16> dq_in(qb), dk_in(kb), dv_in(vb), d_o(n);
    DevBuf<float> d_lse(nstat);
    d_o.poison();
    d_lse.poison();
    attention_forward(dq_in.get(), dk_in.get(), dv_in.get(), d_o.get(), d_lse.get(), s, stream);
    sync();
    const std::string tag = " D" + std::to_string(D) + " T" + std::to_string(s.T) + (pipelined ? " cp.async" : "");
    expect_close("attention fwd o" + tag, d_o.download(), o, kTolBf16);
    expect_close("attention fwd lse" + tag, d_lse.download(), lse, kTolF32);

    // Backward from the reference's o (rounded to bf16, as the GPU stores it) and lse.
    const auto ob = to_bf16_inplace(o);
    std::vector<float> gq(n), gk(n), gv(n);
    ref::attention_backward(q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), gq.data(), gk.data(),
                            gv.data(), s.B, s.T, s.H, D, scale);
    DevBuf<bf16> d_o2(ob), d_do(dob), d_dq(n), d_dk(n), d_dv(n);
    DevBuf<float> d_lse2(lse);
    DevBuf<unsigned char> ws(attention_backward_workspace_bytes(s));
    d_dq.poison();
    d_dk.poison();
    d_dv.poison();
    ws.poison();
    attention_backward(dq_in.get(), dk_in.get(), dv_in.get(), d_o2.get(), d_do.get(), d_lse2.get(), d_dq.get(), d_dk.get(),
                       d_dv.get(), ws.get(), s, stream);
    sync();
    expect_close("attention bwd dq" + tag, d_dq.download(), gq, 2 * kTolBf16);
    expect_close("attention bwd dk" + tag, d_dk.download(), gk, 2 * kTolBf16);
    expect_close("attention bwd dv" + tag, d_dv.download(), gv, 2 * kTolBf16);
  }
}

// The cp.async form computes exactly what the plain form does (same tiles, same products in the
// same order; only when the copies land differs): every output bit for bit, for plain causal
// attention and for queries after cached keys (T 77 after C - T = 126), dk and dv accumulated.
TEST_F(AttentionGpu, PipelinedFormIsBitIdenticalToThePlainOne) {
  auto bits = [](const auto& v) {
    std::vector<std::uint16_t> b;
    for (const auto& x : v) {
      if constexpr (sizeof(x) == 2) b.push_back(reinterpret_cast<const std::uint16_t&>(x));
      else {
        const auto u = reinterpret_cast<const std::uint32_t&>(x);
        b.push_back(std::uint16_t(u & 0xffffu));
        b.push_back(std::uint16_t(u >> 16));
      }
    }
    return b;
  };
  for (int D : {64, 128})
    for (const int C : {203, 0}) {
      AttentionShape s{.B = 2, .T = C ? 77 : 203, .H = 3, .D = D, .C = C, .accumulate_dkv = C != 0};
      const int keys = C ? C : s.T;
      const std::size_t nq = std::size_t(s.B) * s.T * s.H * D, nk = std::size_t(s.B) * keys * s.H * D;
      const std::size_t nstat = std::size_t(s.B) * s.H * s.T;
      auto qf = randn(nq, 50 + D), kf = randn(nk, 51 + D), vf = randn(nk, 52 + D), gf = randn(nq, 53 + D);
      auto dk0 = randn(nk, 54 + D), dv0 = randn(nk, 55 + D);
      DevBuf<bf16> q(to_bf16_inplace(qf)), k(to_bf16_inplace(kf)), v(to_bf16_inplace(vf)), g(to_bf16_inplace(gf));
      std::vector<std::vector<std::uint16_t>> out[2];
      for (const bool pipelined : {false, true}) {
        s.pipelined = pipelined;
        DevBuf<bf16> o(nq), dq(nq), dk(to_bf16_inplace(dk0)), dv(to_bf16_inplace(dv0));
        DevBuf<float> lse(nstat);
        DevBuf<unsigned char> ws(attention_backward_workspace_bytes(s));
        o.poison();
        lse.poison();
        dq.poison();
        attention_forward(q.get(), k.get(), v.get(), o.get(), lse.get(), s, stream);
        attention_backward(q.get(), k.get(), v.get(), o.get(), g.get(), lse.get(), dq.get(), dk.get(), dv.get(), ws.get(),
                           s, stream);
        sync();
        out[pipelined] = {bits(o.download()), bits(lse.download()), bits(dq.download()), bits(dk.download()),
                          bits(dv.download())};
      }
      const char* names[] = {"o", "lse", "dq", "dk", "dv"};
      for (int i = 0; i < 5; ++i)
        EXPECT_EQ(out[0][std::size_t(i)], out[1][std::size_t(i)])
            << names[i] << " differs between the forms, D " << D << " T " << s.T << " C " << keys;
    }
}

TEST_F(AttentionGpu, RejectsUnsupportedHeadDim) {
  const AttentionShape s{.B = 1, .T = 4, .H = 1, .D = 96};
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, stream), std::invalid_argument);
}

}  // namespace
}  // namespace foresight::kernels::gputest
