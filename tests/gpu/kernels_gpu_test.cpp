// Elementwise, layernorm, cross-entropy, embedding, AdamW, MoE and copy launchers against their CPU
// twins on random inputs. Overwritten outputs are poisoned (NaN bytes) before each launch;
// accumulated ("+=") outputs start from random values instead, which checks the accumulation.
#include <numeric>

#include "kernels/reference.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace foresight::kernels::gputest {
namespace {

class ElementwiseGpu : public Gpu {};

TEST_F(ElementwiseGpu, GeluResidualAndCastsIncludingUnalignedTails) {
  const long n = 100003;  // not a multiple of 8: exercises the scalar tail
  auto x = randn(n + 1, 1, 2.0f), y = randn(n + 1, 2);
  const auto xb = to_bf16_inplace(x), yb = to_bf16_inplace(y);
  DevBuf<bf16> dx(xb), dy(yb), dout(n + 1);
  for (int offset : {0, 1}) {  // offset 1: pointers not 16-byte aligned, scalar path only
    const long m = n - offset;
    const std::string tag = offset ? " (unaligned)" : "";
    std::vector<float> want(m);
    ref::gelu_forward(x.data() + offset, want.data(), m);
    dout.poison();
    gelu_forward(dx.get() + offset, dout.get() + offset, m, stream);
    sync();
    auto got = dout.download();
    expect_close("gelu_forward" + tag, std::vector<bf16>(got.begin() + offset, got.begin() + offset + m), want, kTolBf16);

    ref::gelu_backward(x.data() + offset, y.data() + offset, want.data(), m);
    dout.poison();
    gelu_backward(dx.get() + offset, dy.get() + offset, dout.get() + offset, m, stream);
    sync();
    got = dout.download();
    expect_close("gelu_backward" + tag, std::vector<bf16>(got.begin() + offset, got.begin() + offset + m), want, kTolBf16);

    ref::residual_add(x.data() + offset, y.data() + offset, want.data(), m);
    dout.poison();
    residual_add(dx.get() + offset, dy.get() + offset, dout.get() + offset, m, stream);
    sync();
    got = dout.download();
    expect_close("residual_add" + tag, std::vector<bf16>(got.begin() + offset, got.begin() + offset + m), want, kTolBf16);
  }
  DevBuf<float> f(n + 1);
  f.poison();
  cast_to_float(dx.get(), f.get(), n + 1, stream);
  sync();
  expect_close("cast_to_float (exact)", f.download(), x, 0.0);
  auto xf = randn(n, 3);
  DevBuf<float> df(xf);
  dout.poison();
  cast_to_bf16(df.get(), dout.get(), n, stream);
  sync();
  const auto gotb = dout.download();
  long mismatches = 0;
  for (long i = 0; i < n; ++i) mismatches += gotb[i].bits != to_bf16(xf[i]).bits;
  EXPECT_EQ(mismatches, 0) << "cast_to_bf16 must round to nearest even like the host bf16";
}

class LayerNormGpu : public Gpu {};

TEST_F(LayerNormGpu, ForwardAndBackward) {
  const int N = 517, C = 1000;
  auto x = randn(std::size_t(N) * C, 30, 3.0f), g = randn(C, 31), b = randn(C, 32), dy = randn(std::size_t(N) * C, 33);
  for (auto& v : x) v += 5.0f;  // a large mean: the two-pass variance must stay accurate
  const auto xb = to_bf16_inplace(x), gb = to_bf16_inplace(g), bb = to_bf16_inplace(b), dyb = to_bf16_inplace(dy);
  std::vector<float> y(x.size()), mean(N), rstd(N);
  ref::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
  DevBuf<bf16> dxin(xb), dg(gb), dbeta(bb), dyout(x.size());
  DevBuf<float> dmean(N), drstd(N);
  dyout.poison();
  dmean.poison();
  drstd.poison();
  layernorm_forward(dxin.get(), dg.get(), dbeta.get(), dyout.get(), dmean.get(), drstd.get(), N, C, 1e-5f, stream);
  sync();
  expect_close("layernorm fwd y", dyout.download(), y, kTolBf16);
  expect_close("layernorm fwd mean", dmean.download(), mean, kTolF32);
  expect_close("layernorm fwd rstd", drstd.download(), rstd, kTolF32);

  auto dg0 = randn(C, 34), db0 = randn(C, 35);
  std::vector<float> dx(x.size()), wdg = dg0, wdb = db0;
  ref::layernorm_backward(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), wdg.data(), wdb.data(), N, C);
  DevBuf<bf16> ddy(dyb), ddx(x.size());
  DevBuf<float> rmean(mean), rrstd(rstd), ddg(dg0), ddb(db0);
  ddx.poison();
  layernorm_backward(ddy.get(), dxin.get(), dg.get(), rmean.get(), rrstd.get(), ddx.get(), ddg.get(), ddb.get(), N, C,
                     stream);
  sync();
  expect_close("layernorm bwd dx", ddx.download(), dx, kTolBf16);
  expect_close("layernorm bwd dgamma (+=)", ddg.download(), wdg, 1e-3);
  expect_close("layernorm bwd dbeta (+=)", ddb.download(), wdb, 1e-3);
}

class CrossEntropyGpu : public Gpu {};

TEST_F(CrossEntropyGpu, LossAndInPlaceGradient) {
  const int N = 64, V = 50257;
  auto logits = randn(std::size_t(N) * V, 40, 2.0f);
  const auto lb = to_bf16_inplace(logits);
  std::vector<std::int32_t> t(N);
  std::mt19937 rng(41);
  for (int i = 0; i < N; ++i) t[i] = i % 9 == 0 ? -1 : int(rng() % V);
  std::vector<float> loss(N), dl(logits.size());
  ref::softmax_cross_entropy(logits.data(), t.data(), loss.data(), dl.data(), N, V, 1.0f / N);
  DevBuf<bf16> dlog(lb), dgrad(logits.size());
  DevBuf<std::int32_t> dt(t);
  DevBuf<float> dloss(N);
  dloss.poison();
  dgrad.poison();
  softmax_cross_entropy(dlog.get(), dt.get(), dloss.get(), dgrad.get(), N, V, 1.0f / N, stream);
  sync();
  expect_close("cross-entropy loss", dloss.download(), loss, kTolF32);
  expect_close("cross-entropy dlogits", dgrad.download(), dl, kTolBf16);
  dloss.poison();
  softmax_cross_entropy(dlog.get(), dt.get(), dloss.get(), dlog.get(), N, V, 1.0f / N, stream);  // in place
  sync();
  expect_close("cross-entropy loss (in place)", dloss.download(), loss, kTolF32);
  expect_close("cross-entropy dlogits (in place)", dlog.download(), dl, kTolBf16);
}

class EmbeddingGpu : public Gpu {};

TEST_F(EmbeddingGpu, ForwardAndScatterBackward) {
  const int B = 4, T = 64, C = 96, V = 50;  // few tokens: many repeats, the atomics collide
  auto wte = randn(std::size_t(V) * C, 50), wpe = randn(std::size_t(T) * C, 51), dout = randn(std::size_t(B) * T * C, 52);
  const auto wteb = to_bf16_inplace(wte), wpeb = to_bf16_inplace(wpe), doutb = to_bf16_inplace(dout);
  std::vector<std::int32_t> tok(B * T);
  std::mt19937 rng(53);
  for (auto& x : tok) x = int(rng() % V);
  std::vector<float> out(std::size_t(B) * T * C);
  ref::embedding_forward(tok.data(), wte.data(), wpe.data(), out.data(), B, T, C, V);
  DevBuf<bf16> dwte(wteb), dwpe(wpeb), dout_(out.size()), ddo(doutb);
  DevBuf<std::int32_t> dtok(tok);
  dout_.poison();
  embedding_forward(dtok.get(), dwte.get(), dwpe.get(), dout_.get(), B, T, C, V, stream);
  sync();
  expect_close("embedding fwd", dout_.download(), out, kTolBf16);
  auto gwte0 = randn(wte.size(), 54), gwpe0 = randn(wpe.size(), 55);
  std::vector<float> gwte = gwte0, gwpe = gwpe0;
  ref::embedding_backward(tok.data(), dout.data(), gwte.data(), gwpe.data(), B, T, C, V);
  DevBuf<float> dgwte(gwte0), dgwpe(gwpe0);
  embedding_backward(dtok.get(), ddo.get(), dgwte.get(), dgwpe.get(), B, T, C, V, stream);
  sync();
  expect_close("embedding bwd dwte (+=)", dgwte.download(), gwte, kTolF32);
  expect_close("embedding bwd dwpe (+=)", dgwpe.download(), gwpe, kTolF32);
}

class AdamWGpu : public Gpu {};

TEST_F(AdamWGpu, ThreeStepsMatchReference) {
  const long n = 100007;
  auto p = randn(n, 60), m = randn(n, 61, 0.01f), g = randn(n, 63);
  auto v = randn(n, 62, 0.01f);
  for (auto& x : v) x = x * x;  // second moments are non-negative
  const AdamWConfig c{.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f};
  DevBuf<float> dp(p), dm(m), dv(v), dg(g);
  DevBuf<bf16> dpb(n);
  std::vector<bf16> pb(n);
  for (int step = 1; step <= 3; ++step) {
    ref::adamw(p.data(), g.data(), m.data(), v.data(), pb.data(), n, c, step);
    dpb.poison();
    adamw(dp.get(), dg.get(), dm.get(), dv.get(), dpb.get(), n, c, step, stream);
  }
  sync();
  expect_close("adamw master weights", dp.download(), p, 1e-6);
  expect_close("adamw m", dm.download(), m, 1e-6);
  expect_close("adamw v", dv.download(), v, 1e-6);
  expect_close("adamw bf16 copy", dpb.download(), to_floats(pb), kTolBf16);
}

class MoeGpu : public Gpu {};

TEST_F(MoeGpu, RouterPermuteUnpermuteForwardBackward) {
  const int N = 1000, E = 16, k = 2, C = 72;
  const int capacity = int(1.0 * N * k / E);  // capacity factor 1: some assignments are dropped
  for (bool normalize : {false, true}) {
    auto logits = randn(std::size_t(N) * E, 70);
    std::vector<std::int32_t> expert(N * k), slot(N * k), counts(E);
    std::vector<float> gate(N * k);
    ref::moe_router_forward(logits.data(), N, E, k, capacity, normalize, expert.data(), gate.data(), slot.data(),
                            counts.data());
    DevBuf<float> dlogits(logits), dgate(N * k);
    DevBuf<std::int32_t> dexpert(N * k), dslot(N * k), dcounts(E);
    dexpert.poison();
    dslot.poison(0x7F);  // -1 is a valid slot
    dcounts.poison();
    dgate.poison();
    moe_router_forward(dlogits.get(), N, E, k, capacity, normalize, dexpert.get(), dgate.get(), dslot.get(),
                       dcounts.get(), stream);
    sync();
    EXPECT_EQ(dexpert.download(), expert);
    EXPECT_EQ(dslot.download(), slot);
    EXPECT_EQ(dcounts.download(), counts);
    expect_close(std::string("router gates, normalize ") + (normalize ? "on" : "off"), dgate.download(), gate, kTolF32);
    const long dropped = std::count(slot.begin(), slot.end(), -1);
    std::printf("  router: %ld of %d assignments dropped at capacity %d\n", dropped, N * k, capacity);

    auto dg = randn(N * k, 71);
    std::vector<float> dl(std::size_t(N) * E);
    ref::moe_router_backward(logits.data(), expert.data(), dg.data(), N, E, k, normalize, dl.data());
    DevBuf<float> ddg(dg), ddl(dl.size());
    ddl.poison();
    moe_router_backward(dlogits.get(), dexpert.get(), ddg.get(), N, E, k, normalize, ddl.get(), stream);
    sync();
    expect_close("router backward dlogits", ddl.download(), dl, kTolF32);
  }
  // Permutations over the last routing (normalize on).
  auto logits = randn(std::size_t(N) * E, 70);
  std::vector<std::int32_t> expert(N * k), slot(N * k), counts(E);
  std::vector<float> gate(N * k);
  ref::moe_router_forward(logits.data(), N, E, k, capacity, true, expert.data(), gate.data(), slot.data(), counts.data());
  auto x = randn(std::size_t(N) * C, 72), eo = randn(std::size_t(E) * capacity * C, 73), dy = randn(std::size_t(N) * C, 74);
  const auto xb = to_bf16_inplace(x), eob = to_bf16_inplace(eo), dyb = to_bf16_inplace(dy);
  DevBuf<bf16> dx(xb), deo(eob), ddy(dyb), dbuf(eo.size()), drow(x.size());
  DevBuf<std::int32_t> dexpert(expert), dslot(slot);
  DevBuf<float> dgate(gate), ddgate(N * k);

  std::vector<float> want(eo.size());
  ref::moe_permute(x.data(), expert.data(), slot.data(), want.data(), N, k, C, E, capacity);
  dbuf.poison();
  moe_permute(dx.get(), dexpert.get(), dslot.get(), dbuf.get(), N, k, C, E, capacity, stream);
  sync();
  expect_close("moe_permute (exact copy)", dbuf.download(), want, 0.0);

  std::vector<float> wantx(x.size());
  ref::moe_permute_backward(eo.data(), expert.data(), slot.data(), wantx.data(), N, k, C, capacity);
  drow.poison();
  moe_permute_backward(deo.get(), dexpert.get(), dslot.get(), drow.get(), N, k, C, capacity, stream);
  sync();
  expect_close("moe_permute_backward", drow.download(), wantx, kTolBf16);

  std::vector<float> wanty(x.size());
  ref::moe_unpermute(eo.data(), expert.data(), slot.data(), gate.data(), wanty.data(), N, k, C, capacity);
  drow.poison();
  moe_unpermute(deo.get(), dexpert.get(), dslot.get(), dgate.get(), drow.get(), N, k, C, capacity, stream);
  sync();
  expect_close("moe_unpermute", drow.download(), wanty, kTolBf16);

  std::vector<float> wdeo(eo.size()), wdg(N * k);
  ref::moe_unpermute_backward(dy.data(), eo.data(), expert.data(), slot.data(), gate.data(), wdeo.data(), wdg.data(), N,
                              k, C, E, capacity);
  dbuf.poison();
  ddgate.poison();
  moe_unpermute_backward(ddy.get(), deo.get(), dexpert.get(), dslot.get(), dgate.get(), dbuf.get(), ddgate.get(), N, k, C,
                         E, capacity, stream);
  sync();
  expect_close("moe_unpermute_backward d_expert_out", dbuf.download(), wdeo, kTolBf16);
  expect_close("moe_unpermute_backward dgate", ddgate.download(), wdg, 1e-3);
}

class CopyGpu : public Gpu {};

TEST_F(CopyGpu, PinnedRoundTripIsExact) {
  const std::size_t bytes = std::size_t(64) << 20;
  auto* h = static_cast<unsigned char*>(pinned_alloc(bytes));
  auto* back = static_cast<unsigned char*>(pinned_alloc(bytes));
  for (std::size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  DevBuf<unsigned char> a(bytes), b(bytes);
  b.poison();
  copy_h2d(a.get(), h, bytes, stream);
  copy_d2d(b.get(), a.get(), bytes, stream);
  copy_d2h(back, b.get(), bytes, stream);
  sync();
  EXPECT_EQ(std::memcmp(h, back, bytes), 0);
  pinned_free(h);
  pinned_free(back);
}

}  // namespace
}  // namespace foresight::kernels::gputest
