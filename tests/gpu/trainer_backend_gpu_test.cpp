// The trainer's CUDA backend against its CPU backend (itself checked against a float64 reference
// in tests/trainer/layer_reference_test.cpp): every Backend op on random inputs, outputs poisoned
// with NaN first so an element the GPU never writes fails; then whole training runs (one rank,
// dense, TeraPipe slices with recompute, MoE) whose per-step losses must match the CPU's. Skips
// itself without a GPU. The bf16 recipe's twin: trainer_backend_bf16_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "tests/gpu/trainer_runs.hpp"
#include "trainer/backend.hpp"
#include "trainer/communicator.hpp"
#include "trainer/trainer.hpp"

namespace foresight::trainer {
namespace {

// fp32 math on both sides (cuBLAS in pedantic fp32): differences are summation order only.
constexpr double kTol = 2e-5;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto c = kernels::device_count();
    if (c.count == 0) GTEST_SKIP() << c.reason;
    gpu = make_backend("cuda");
    cpu = make_backend("cpu");
  }

  /// The same random (rows, cols) tensor on both backends.
  std::pair<Tensor, Tensor> pair(std::int64_t rows, std::int64_t cols, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> h(std::size_t(rows * cols));
    for (float& x : h) x = d(rng);
    Tensor c = cpu->zeros(rows, cols), g = gpu->zeros(rows, cols);
    cpu->copy_from_host(c, h);
    gpu->copy_from_host(g, h);
    return {c, g};
  }
  /// An output tensor: zeros on the CPU, NaN on the GPU (overwriting ops must write every element).
  std::pair<Tensor, Tensor> out(std::int64_t rows, std::int64_t cols) {
    Tensor c = cpu->zeros(rows, cols), g = gpu->zeros(rows, cols);
    gpu->fill(g, std::numeric_limits<float>::quiet_NaN());
    return {c, g};
  }
  std::vector<float> host(Backend& be, const Tensor& t) {
    std::vector<float> v(std::size_t(t.numel()));
    be.copy_to_host(v, t);
    return v;
  }
  /// Normwise relative error over columns [first_col, last_col) of every row (all columns by
  /// default), so that a block of large values cannot hide the error of a block of small ones.
  void expect_close(const std::string& what, const std::pair<Tensor, Tensor>& t, double tol = kTol,
                    std::int64_t first_col = 0, std::int64_t last_col = -1) {
    const std::vector<float> want = host(*cpu, t.first), got = host(*gpu, t.second);
    const std::int64_t cols = t.first.cols();
    if (last_col < 0) last_col = cols;
    double err = 0, scale = 1e-30;
    long bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::int64_t col = std::int64_t(i) % cols;
      if (col < first_col || col >= last_col) continue;
      if (!std::isfinite(got[i])) {
        ++bad;
        continue;
      }
      err = std::max(err, std::abs(double(got[i]) - want[i]));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    std::printf("  %-36s max abs %.3e  rel %.3e\n", what.c_str(), err, err / scale);
    EXPECT_EQ(bad, 0) << what << ": non-finite outputs";
    EXPECT_LE(err / scale, tol) << what;
  }

  std::unique_ptr<Backend> gpu, cpu;
  std::mt19937 rng{20261123};
};

TEST_F(CudaBackendTest, ElementwiseReductionsAndStorage) {
  auto x = pair(37, 129), y = pair(37, 129);
  cpu->add(y.first, x.first);
  gpu->add(y.second, x.second);
  expect_close("add", y);
  EXPECT_NEAR(gpu->sum_squares(x.second), cpu->sum_squares(x.first), 1e-9 * cpu->sum_squares(x.first));
  {
    // The batched form (the gradient norm's): each entry the single call's double, bit for bit.
    auto x2 = pair(3, 5), x3 = pair(0, 4);
    const std::vector<Tensor> xs = {x.second, x2.second, x3.second};
    const std::vector<double> many = gpu->sum_squares_many(xs);
    ASSERT_EQ(many.size(), 3u);
    EXPECT_EQ(many[0], gpu->sum_squares(x.second));
    EXPECT_EQ(many[1], gpu->sum_squares(x2.second));
    EXPECT_EQ(many[2], 0.0);
  }
  EXPECT_TRUE(gpu->all_finite(x.second));
  std::vector<float> h = host(*gpu, x.second);
  h[1000] = std::numeric_limits<float>::infinity();
  gpu->copy_from_host(x.second, h);
  EXPECT_FALSE(gpu->all_finite(x.second));
  auto c = out(37, 129);
  cpu->copy(c.first, y.first);
  gpu->copy(c.second, y.second);
  expect_close("copy", c);
  const std::int64_t before = gpu->bytes_in_use();
  { Tensor t = gpu->zeros(1000, 1000); EXPECT_EQ(gpu->bytes_in_use(), before + 4000000); }
  EXPECT_EQ(gpu->bytes_in_use(), before);
  Tensor z = gpu->zeros(3, 5);  // from the cache: must still come back zeroed
  for (float v : host(*gpu, z)) EXPECT_EQ(v, 0.0f);
}

TEST_F(CudaBackendTest, MatmulEveryTransposeAndAccumulate) {
  const std::int64_t M = 67, N = 45, K = 93;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int acc = 0; acc < 2; ++acc) {
        auto a = ta ? pair(K, M) : pair(M, K);
        auto b = tb ? pair(N, K) : pair(K, N);
        auto c = acc ? pair(M, N) : out(M, N);
        cpu->matmul(c.first, a.first, ta, b.first, tb, acc);
        gpu->matmul(c.second, a.second, ta, b.second, tb, acc);
        expect_close("matmul ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " acc " + std::to_string(acc), c);
      }
  // TF32 tensor cores: 10-bit mantissa products, so a looser bound.
  auto tf32 = make_backend("cuda-tf32");
  EXPECT_EQ(tf32->compute_dtype(), "tf32");
  std::vector<float> ha(M * K), hb(K * N);
  std::normal_distribution<float> d;
  for (float& v : ha) v = d(rng);
  for (float& v : hb) v = d(rng);
  Tensor ca = cpu->zeros(M, K), cb = cpu->zeros(K, N), cc = cpu->zeros(M, N);
  Tensor ga = tf32->zeros(M, K), gb = tf32->zeros(K, N), gc = tf32->zeros(M, N);
  cpu->copy_from_host(ca, ha), cpu->copy_from_host(cb, hb), tf32->copy_from_host(ga, ha), tf32->copy_from_host(gb, hb);
  cpu->matmul(cc, ca, false, cb, false, false);
  tf32->matmul(gc, ga, false, gb, false, false);
  std::vector<float> want = host(*cpu, cc), got(std::size_t(M * N));
  tf32->copy_to_host(got, gc);
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(double(got[i]) - want[i])), scale = std::max(scale, std::abs(double(want[i])));
  std::printf("  %-36s rel %.3e\n", "matmul tf32", err / scale);
  EXPECT_LE(err / scale, 5e-3);
  // And TF32 is really on: 10-bit products leave errors far above fp32's ~1e-7 at K = 93.
  EXPECT_GT(err / scale, 1e-5) << "cuda-tf32 computed like fp32: TF32 tensor cores not used";
}

TEST_F(CudaBackendTest, BiasLayerNormGelu) {
  const std::int64_t N = 50, C = 300;
  auto y = pair(N, C), bias = pair(1, C);
  cpu->add_bias(y.first, bias.first);
  gpu->add_bias(y.second, bias.second);
  expect_close("add_bias", y);
  auto db = pair(1, C);
  cpu->bias_backward(db.first, y.first);
  gpu->bias_backward(db.second, y.second);
  expect_close("bias_backward (accumulates)", db);

  auto x = pair(N, C, 3.0f), gamma = pair(1, C), beta = pair(1, C);
  auto ln = out(N, C), mean = out(N, 1), rstd = out(N, 1);
  cpu->layernorm_forward(ln.first, mean.first, rstd.first, x.first, gamma.first, beta.first);
  gpu->layernorm_forward(ln.second, mean.second, rstd.second, x.second, gamma.second, beta.second);
  expect_close("layernorm_forward y", ln);
  expect_close("layernorm_forward mean", mean);
  expect_close("layernorm_forward rstd", rstd);
  auto dy = pair(N, C), dx = out(N, C), dg = pair(1, C), dbeta = pair(1, C);
  cpu->layernorm_backward(dx.first, dg.first, dbeta.first, dy.first, x.first, mean.first, rstd.first, gamma.first);
  gpu->layernorm_backward(dx.second, dg.second, dbeta.second, dy.second, x.second, mean.second, rstd.second, gamma.second);
  expect_close("layernorm_backward dx", dx);
  expect_close("layernorm_backward dgamma", dg);
  expect_close("layernorm_backward dbeta", dbeta);

  auto gy = out(N, C), gdx = out(N, C);
  cpu->gelu_forward(gy.first, x.first);
  gpu->gelu_forward(gy.second, x.second);
  expect_close("gelu_forward", gy);
  cpu->gelu_backward(gdx.first, dy.first, x.first);
  gpu->gelu_backward(gdx.second, dy.second, x.second);
  expect_close("gelu_backward", gdx);
}

// Plain causal attention (kv = qkv) and a TeraPipe slice (8 queries after 24 cached positions).
TEST_F(CudaBackendTest, AttentionForwardBackward) {
  for (const int context : {0, 32}) {
    AttentionShape s{.batch = 2, .seq = context ? 8 : 24, .heads = 3, .head_dim = 16, .context = context};
    const std::int64_t HD = s.heads * s.head_dim, N = std::int64_t(s.batch) * s.seq, NK = std::int64_t(s.batch) * s.keys();
    auto qkv = pair(N, 3 * HD), kv = context ? pair(NK, 3 * HD) : qkv;
    auto o = out(N, HD), probs = out(std::int64_t(s.batch) * s.heads * s.seq, s.keys());
    cpu->attention_forward(o.first, probs.first, qkv.first, kv.first, s);
    gpu->attention_forward(o.second, probs.second, qkv.second, kv.second, s);
    const std::string tag = context ? " (slice after 24)" : " (causal)";
    expect_close("attention_forward out" + tag, o);
    expect_close("attention_forward probs" + tag, probs);
    auto dout = pair(N, HD);
    // dqkv's query columns are overwritten, the key/value columns of dkv accumulate: start both
    // from the same random values (the CPU and GPU must then agree on every column).
    auto dqkv = pair(N, 3 * HD);
    auto dkv = context ? pair(NK, 3 * HD) : dqkv;
    cpu->attention_backward(dqkv.first, dkv.first, dout.first, o.first, probs.first, qkv.first, kv.first, s);
    gpu->attention_backward(dqkv.second, dkv.second, dout.second, o.second, probs.second, qkv.second, kv.second, s);
    expect_close("attention_backward dq" + tag, dqkv, 1e-4, 0, HD);
    if (context)
      expect_close("attention_backward dk, dv" + tag, dkv, 1e-4, HD, 3 * HD);
    else
      expect_close("attention_backward dk, dv" + tag, dqkv, 1e-4, HD, 3 * HD);
  }
}

TEST_F(CudaBackendTest, EmbeddingsPositionsAndCrossEntropy) {
  const std::int64_t N = 40, C = 24, V = 30, offset = 10;
  std::vector<std::int32_t> tokens(N);
  std::uniform_int_distribution<int> tok(0, 49);  // some below, some above this rank's rows
  for (auto& t : tokens) t = tok(rng);
  auto table = pair(V, C), x = out(N, C);
  cpu->embedding_forward(x.first, table.first, tokens, offset);
  gpu->embedding_forward(x.second, table.second, tokens, offset);
  expect_close("embedding_forward", x);
  auto dx = pair(N, C), dtable = pair(V, C);
  cpu->embedding_backward(dtable.first, dx.first, tokens, offset);
  gpu->embedding_backward(dtable.second, dx.second, tokens, offset);
  expect_close("embedding_backward", dtable, 0.0);  // same float additions in the same order

  const TokenPositions p{.first_row = 5, .period = 16, .offset = 3};
  auto positions = pair(20, C), xp = pair(N, C);
  cpu->add_positions(xp.first, positions.first, p);
  gpu->add_positions(xp.second, positions.second, p);
  expect_close("add_positions", xp);
  auto dpos = pair(20, C);
  cpu->positions_backward(dpos.first, dx.first, p);
  gpu->positions_backward(dpos.second, dx.second, p);
  expect_close("positions_backward", dpos);

  auto logits = pair(N, V, 4.0f), row_max = out(N, 1), stats = out(N, 2);
  cpu->logits_row_max(row_max.first, logits.first);
  gpu->logits_row_max(row_max.second, logits.second);
  expect_close("logits_row_max", row_max, 0.0);
  cpu->logits_sum_exp_and_target(stats.first, logits.first, row_max.first, tokens, offset);
  gpu->logits_sum_exp_and_target(stats.second, logits.second, row_max.second, tokens, offset);
  expect_close("logits_sum_exp_and_target", stats);
  const double lc = cpu->cross_entropy_loss_sum(row_max.first, stats.first);
  EXPECT_NEAR(gpu->cross_entropy_loss_sum(row_max.second, stats.second), lc, 1e-5 * std::abs(lc));
  auto dl = out(N, V);
  cpu->cross_entropy_backward(dl.first, logits.first, row_max.first, stats.first, tokens, offset, 0.25f);
  gpu->cross_entropy_backward(dl.second, logits.second, row_max.second, stats.second, tokens, offset, 0.25f);
  expect_close("cross_entropy_backward", dl);
}

TEST_F(CudaBackendTest, AdamW) {
  auto p = pair(100, 77), g = pair(100, 77), m = pair(100, 77, 0.1f), v = pair(100, 77, 0.1f);
  // Second moments must be non-negative.
  for (auto* be : {cpu.get(), gpu.get()}) {
    Tensor t = be == cpu.get() ? v.first : v.second;
    std::vector<float> h(std::size_t(t.numel()));
    be->copy_to_host(h, t);
    for (float& x : h) x = x * x;
    be->copy_from_host(t, h);
  }
  const AdamWStep h{.lr = 3e-3f, .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 7};
  cpu->adamw(p.first, g.first, m.first, v.first, h);
  gpu->adamw(p.second, g.second, m.second, v.second, h);
  expect_close("adamw param", p);
  expect_close("adamw m", m);
  expect_close("adamw v", v);
}

using gpu_test::losses;
using gpu_test::tiny_plan;

TEST_F(CudaBackendTest, TrainingRunsMatchTheCpuBackend) {
  for (const gpu_test::RunCase& c : gpu_test::run_cases()) {
    const std::string plan = tiny_plan(c.plan, c.model, c.heads);
    const std::vector<double> want = losses(plan, "cpu"), got = losses(plan, "cuda");
    ASSERT_EQ(got.size(), want.size()) << c.name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      std::printf("  %-34s step %zu  loss cpu %.7f  cuda %.7f\n", c.name, i + 1, want[i], got[i]);
      EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << c.name << " step " << i + 1;
    }
    EXPECT_LT(want.back(), want.front()) << c.name << ": the loss should fall";
  }
}

}  // namespace
}  // namespace foresight::trainer
