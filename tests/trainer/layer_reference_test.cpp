// The trainer's fp32 CPU math against an independent float64 reference (reference_model.hpp):
// one decoder layer's forward, its backward against central finite differences of the reference,
// and a whole one-stage model's loss and embedding / final-LayerNorm gradients (tied embedding,
// vocabulary-parallel cross-entropy with tp = 1); and one layer under the bf16 recipe against the
// float64 reference of its bf16-rounded inputs, within the bound of its roundings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "kernels/bf16.hpp"
#include "reference_model.hpp"
#include "trainer/cpu_backend.hpp"
#include "trainer/gpt.hpp"
#include "trainer/layer.hpp"

namespace foresight::trainer {
namespace {

using test::RefDims;
using test::RefLayer;
using test::Vec;

Vec random_vec(std::mt19937& rng, std::size_t n, double center, double spread) {
  std::uniform_real_distribution<double> u(-spread, spread);
  Vec v(n);
  for (double& x : v) x = center + u(rng);
  return v;
}

Tensor to_tensor(Backend& be, const Vec& v, std::int64_t rows, std::int64_t cols) {
  Tensor t = be.zeros(rows, cols);
  std::vector<float> f(v.begin(), v.end());
  be.copy_from_host(t, f);
  return t;
}

Vec to_vec(Backend& be, const Tensor& t) {
  std::vector<float> f(std::size_t(t.numel()));
  be.copy_to_host(f, t);
  return Vec(f.begin(), f.end());
}

/// max |a - b| / max |b|: error relative to the tensor's scale.
double scaled_error(const Vec& a, const Vec& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

/// Central difference of f with respect to every element of *p (step 1e-5, float64).
template <class F>
Vec finite_difference(Vec* p, F&& f) {
  constexpr double h = 1e-5;
  Vec g(p->size());
  for (std::size_t i = 0; i < p->size(); ++i) {
    const double keep = (*p)[i];
    (*p)[i] = keep + h;
    const double up = f();
    (*p)[i] = keep - h;
    const double down = f();
    (*p)[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

constexpr RefDims kDims{.batch = 2, .seq = 5, .hidden = 8, .heads = 2, .ffn = 16};

RefLayer random_layer(std::mt19937& rng) {
  const std::size_t H = kDims.hidden, F = kDims.ffn;
  RefLayer l;
  l.ln1_g = random_vec(rng, H, 1.0, 0.3);
  l.ln1_b = random_vec(rng, H, 0.0, 0.3);
  l.w_qkv = random_vec(rng, H * 3 * H, 0.0, 0.5);
  l.b_qkv = random_vec(rng, 3 * H, 0.0, 0.3);
  l.w_o = random_vec(rng, H * H, 0.0, 0.5);
  l.b_o = random_vec(rng, H, 0.0, 0.3);
  l.ln2_g = random_vec(rng, H, 1.0, 0.3);
  l.ln2_b = random_vec(rng, H, 0.0, 0.3);
  l.w_fc1 = random_vec(rng, H * F, 0.0, 0.5);
  l.b_fc1 = random_vec(rng, F, 0.0, 0.3);
  l.w_fc2 = random_vec(rng, F * H, 0.0, 0.5);
  l.b_fc2 = random_vec(rng, H, 0.0, 0.3);
  return l;
}

/// One layer's forward and backward against the float64 reference. `selective`: the attention
/// core is dropped after the forward (selective recompute) and must be rebuilt by the backward.
void check_layer_against_float64(bool selective) {
  std::mt19937 rng(7);
  RefLayer ref = random_layer(rng);
  const int N = kDims.tokens(), H = kDims.hidden, F = kDims.ffn;
  Vec x = random_vec(rng, std::size_t(N) * H, 0.0, 1.0);
  const Vec r = random_vec(rng, std::size_t(N) * H, 0.0, 1.0);  // L = sum(out * r)

  auto be = make_cpu_backend();
  auto self = make_self_communicator();
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, H}, {1, H}, {H, 3 * H}, {1, 3 * H}, {H, H}, {1, H},
                                                          {1, H}, {1, H}, {H, F},     {1, F},     {F, H}, {1, H}};
  std::vector<Tensor> w, g;
  const auto params = ref.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    w.push_back(to_tensor(*be, *params[i], shapes[i].first, shapes[i].second));
    g.push_back(be->zeros(shapes[i].first, shapes[i].second));
  }
  auto pack = [](const std::vector<Tensor>& t) {
    return LayerTensors{t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]};
  };
  const LayerDims dims{.batch = kDims.batch, .seq = kDims.seq, .hidden = H, .heads = kDims.heads,
                       .head_dim = kDims.head_dim(), .ffn = F};
  LayerActivations acts;
  acts.x = to_tensor(*be, x, N, H);
  layer_forward(*be, *self, dims, pack(w), acts);
  const double fwd_err = scaled_error(to_vec(*be, acts.out), test::ref_layer_forward(kDims, ref, x));
  std::printf("layer forward: max error / max |out| = %.3e\n", fwd_err);
  EXPECT_LT(fwd_err, 1e-6);
  if (selective) {
    acts.drop_attention_core();
    EXPECT_FALSE(acts.probs.defined());  // the (batch*heads*seq, seq) softmax is really gone
    EXPECT_FALSE(acts.attn.defined());
  }

  const Tensor dx = layer_backward(*be, *self, dims, pack(w), pack(g), acts, to_tensor(*be, r, N, H));
  auto loss = [&] {
    const Vec out = test::ref_layer_forward(kDims, ref, x);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
    return s;
  };
  const char* names[] = {"ln1_g", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_g", "ln2_b", "w_fc1", "b_fc1", "w_fc2", "b_fc2"};
  for (std::size_t i = 0; i < params.size(); ++i) {
    // b_qkv's key part has a mathematically zero gradient (softmax ignores a per-query constant);
    // the scaled error still compares it against the tensor's largest entries.
    const double err = scaled_error(to_vec(*be, g[i]), finite_difference(params[i], loss));
    std::printf("layer backward %-6s: max error / max |grad| = %.3e\n", names[i], err);
    EXPECT_LT(err, 1e-5) << names[i];
  }
  const double dx_err = scaled_error(to_vec(*be, dx), finite_difference(&x, loss));
  std::printf("layer backward dx    : max error / max |grad| = %.3e\n", dx_err);
  EXPECT_LT(dx_err, 1e-5);
}

TEST(LayerReference, ForwardAndBackwardMatchFloat64) { check_layer_against_float64(false); }

TEST(LayerReference, SelectiveRecomputeBackwardMatchesFloat64) { check_layer_against_float64(true); }

/// TeraPipe: the layer run as two token slices of every sequence (2 then 3 tokens), the second
/// attending to the first's cached K/V, backward in reverse order sharing a K/V gradient
/// accumulator, against the float64 reference of the whole sequence (forward rows, parameter and
/// input gradients by finite differences).
TEST(LayerReference, TeraPipeSlicesMatchFloat64) {
  std::mt19937 rng(7);
  RefLayer ref = random_layer(rng);
  const int B = kDims.batch, S = kDims.seq, N = kDims.tokens(), H = kDims.hidden, F = kDims.ffn;
  Vec x = random_vec(rng, std::size_t(N) * H, 0.0, 1.0);
  const Vec r = random_vec(rng, std::size_t(N) * H, 0.0, 1.0);  // L = sum(out * r)

  auto be = make_cpu_backend();
  auto self = make_self_communicator();
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, H}, {1, H}, {H, 3 * H}, {1, 3 * H}, {H, H}, {1, H},
                                                          {1, H}, {1, H}, {H, F},     {1, F},     {F, H}, {1, H}};
  std::vector<Tensor> w, g;
  const auto params = ref.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    w.push_back(to_tensor(*be, *params[i], shapes[i].first, shapes[i].second));
    g.push_back(be->zeros(shapes[i].first, shapes[i].second));
  }
  auto pack = [](const std::vector<Tensor>& t) {
    return LayerTensors{t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]};
  };
  const int off[2] = {0, 2}, len[2] = {2, 3};
  // Rows of slice k of every sequence, (B*len, H), and back.
  auto take = [&](const Vec& v, int k) {
    Vec o;
    for (int b = 0; b < B; ++b)
      for (int t = off[k]; t < off[k] + len[k]; ++t)
        o.insert(o.end(), v.begin() + (b * S + t) * H, v.begin() + (b * S + t + 1) * H);
    return o;
  };
  auto put = [&](Vec& v, const Vec& rows, int k) {
    std::size_t i = 0;
    for (int b = 0; b < B; ++b)
      for (int t = off[k]; t < off[k] + len[k]; ++t, i += std::size_t(H))
        std::copy(rows.begin() + std::ptrdiff_t(i), rows.begin() + std::ptrdiff_t(i) + H, v.begin() + (b * S + t) * H);
  };
  auto dims = [&](int k) {
    return LayerDims{.batch = B, .seq = len[k], .hidden = H, .heads = kDims.heads, .head_dim = kDims.head_dim(),
                     .ffn = F, .past = off[k]};
  };
  LayerActivations acts[2];
  Vec out(std::size_t(N) * H);
  for (int k = 0; k < 2; ++k) {
    acts[k].x = to_tensor(*be, take(x, k), B * len[k], H);
    if (k > 0) acts[k].past_kv = attention_context(acts[k - 1]);
    layer_forward(*be, *self, dims(k), pack(w), acts[k]);
    put(out, to_vec(*be, acts[k].out), k);
  }
  const double fwd_err = scaled_error(out, test::ref_layer_forward(kDims, ref, x));
  std::printf("sliced layer forward: max error / max |out| = %.3e\n", fwd_err);
  EXPECT_LT(fwd_err, 1e-6);

  const Tensor kv_grad = be->zeros(std::int64_t(B) * S, 3 * H);
  Vec dx(std::size_t(N) * H);
  for (int k = 1; k >= 0; --k) {
    const Tensor d = layer_backward(*be, *self, dims(k), pack(w), pack(g), acts[k],
                                    to_tensor(*be, take(r, k), B * len[k], H), kv_grad);
    put(dx, to_vec(*be, d), k);
  }
  auto loss = [&] {
    const Vec o = test::ref_layer_forward(kDims, ref, x);
    double sum = 0;
    for (std::size_t i = 0; i < o.size(); ++i) sum += o[i] * r[i];
    return sum;
  };
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double err = scaled_error(to_vec(*be, g[i]), finite_difference(params[i], loss));
    EXPECT_LT(err, 1e-5) << "parameter " << i;
  }
  const double dx_err = scaled_error(dx, finite_difference(&x, loss));
  std::printf("sliced layer backward dx: max error / max |grad| = %.3e\n", dx_err);
  EXPECT_LT(dx_err, 1e-5);
}

/// Every element rounded to the nearest bf16.
Vec rounded_to_bf16(Vec v) {
  for (double& x : v) x = kernels::round_bf16(float(x));
  return v;
}

/// Whether a backend tensor holds bf16 values only (each element its own rounding).
bool holds_bf16_values(Backend& be, const Tensor& t) {
  const Vec v = to_vec(be, t);
  return std::all_of(v.begin(), v.end(), [](double x) { return double(kernels::round_bf16(float(x))) == x; });
}

// The bf16 recipe on one layer. Its inputs (x and the weights' working copy) are bf16, so the
// float64 reference gets the same rounded inputs; what remains is the rounding of every result.
//
// The bound: rounding to bf16 (8 significant bits, to nearest) moves a value by at most u = 2^-8
// of itself. On the path from x to one output element the layer rounds k = 16 times: LN1, the QKV
// GEMM, + b_qkv, the attention scores, the softmax probabilities, probs x V, the W_o GEMM, + b_o,
// + the residual, LN2, the FC1 GEMM, + b_fc1, GeLU, the FC2 GEMM, + b_fc2, + the residual. To first
// order each rounding adds an error of at most u times the value it rounds, carried to the output
// by the layer's gain; the random weights here (uniform +-0.5 over 8 or 16 inputs) and the
// LayerNorms keep every intermediate within about max |out| and the gains near 1, so the error
// relative to max |out| stays below k u = 16 * 2^-8 = 0.0625. (The roundings' signs are
// independent, so the typical error is nearer sqrt(k) u / sqrt(3) ~ 0.01, and the bound has room
// for gains somewhat above 1.) A floor of 2^-12 shows that the roundings happened: the same layer
// in fp32 is within 1e-6 of the reference.
TEST(LayerReference, Bf16ForwardWithinTheRoundingBoundOfFloat64) {
  std::mt19937 rng(7);
  RefLayer ref = random_layer(rng);
  for (Vec* p : ref.all()) *p = rounded_to_bf16(*p);
  const int N = kDims.tokens(), H = kDims.hidden, F = kDims.ffn;
  const Vec x = rounded_to_bf16(random_vec(rng, std::size_t(N) * H, 0.0, 1.0));

  auto be = make_cpu_backend(Precision::bf16);
  auto self = make_self_communicator();
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, H}, {1, H}, {H, 3 * H}, {1, 3 * H}, {H, H}, {1, H},
                                                          {1, H}, {1, H}, {H, F},     {1, F},     {F, H}, {1, H}};
  std::vector<Tensor> w;
  const auto params = ref.all();
  for (std::size_t i = 0; i < params.size(); ++i) w.push_back(to_tensor(*be, *params[i], shapes[i].first, shapes[i].second));
  const LayerDims dims{.batch = kDims.batch, .seq = kDims.seq, .hidden = H, .heads = kDims.heads,
                       .head_dim = kDims.head_dim(), .ffn = F};
  LayerActivations acts;
  acts.x = to_tensor(*be, x, N, H);
  layer_forward(*be, *self, dims, LayerTensors{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11]},
                acts);
  const double err = scaled_error(to_vec(*be, acts.out), test::ref_layer_forward(kDims, ref, x));
  constexpr int kRoundings = 16;
  const double bound = kRoundings * std::ldexp(1.0, -8);
  std::printf("bf16 layer forward: max error / max |out| = %.3e (bound %d * 2^-8 = %.3e)\n", err, kRoundings, bound);
  EXPECT_LT(err, bound);
  EXPECT_GT(err, std::ldexp(1.0, -12));

  // Every activation the layer keeps or passes on is bf16; its LayerNorm statistics are fp32.
  const std::pair<const char*, const Tensor*> kept[] = {{"a", &acts.a},       {"qkv", &acts.qkv}, {"probs", &acts.probs},
                                                        {"attn", &acts.attn}, {"x1", &acts.x1},   {"c", &acts.c},
                                                        {"fc1", &acts.fc1},   {"gelu", &acts.gelu}, {"out", &acts.out}};
  for (const auto& [name, t] : kept) {
    EXPECT_EQ(t->element_type(), ElementType::bf16) << name;
    EXPECT_TRUE(holds_bf16_values(*be, *t)) << name;
  }
  for (const Tensor* t : {&acts.mean1, &acts.rstd1, &acts.mean2, &acts.rstd2})
    EXPECT_EQ(t->element_type(), ElementType::fp32);
  // (A 1/std of 16 values of spread ~1 is bf16-representable by chance only: kept in fp32 they are not.)
  EXPECT_FALSE(holds_bf16_values(*be, acts.rstd1));
}

TEST(LayerReference, WholeStageLossAndEmbeddingGradients) {
  ModelSpec m;
  m.name = "ref";
  m.layers = 1;
  m.hidden = kDims.hidden;
  m.heads = kDims.heads;
  m.seq_len = kDims.seq;
  m.vocab = 16;
  m.ffn_hidden = kDims.ffn;
  m.kv_heads = m.heads;
  PlanSpec plan;
  const RankLayout layout = make_layout(plan, 0);
  auto be = make_cpu_backend();
  auto self = make_self_communicator();
  ParamStore store(1, 0);
  GptStage stage(m, layout, StageConfig{.micro_batch = kDims.batch, .recompute = Recompute::full}, store);
  store.allocate(*be, 1);
  ASSERT_EQ(store.size(), 2 + 12 + 2);  // wte, wpe, one layer, lnf_g, lnf_b

  // Replace the small GPT-2 initial values with larger random ones so every term matters.
  std::mt19937 rng(11);
  std::vector<Vec> values;
  for (int i = 0; i < store.size(); ++i) {
    const bool gain = store[i].decl.init == Init::ones;
    values.push_back(random_vec(rng, std::size_t(store[i].value.numel()), gain ? 1.0 : 0.0, gain ? 0.3 : 0.5));
    std::vector<float> f(values.back().begin(), values.back().end());
    be->copy_from_host(store[i].value, f);
  }
  MicroBatch mb;
  std::uniform_int_distribution<int> tok(0, m.vocab - 1);
  for (int n = 0; n < kDims.tokens(); ++n) {
    mb.inputs.push_back(tok(rng));
    mb.targets.push_back(tok(rng));
  }
  std::vector<RefLayer> layers(1);
  auto lp = layers[0].all();
  auto ref_loss = [&] {
    for (int k = 0; k < 12; ++k) *lp[std::size_t(k)] = values[std::size_t(2 + k)];
    return test::ref_model_loss(kDims, m.vocab, values[0], values[1], layers, values[14], values[15], mb.inputs,
                                mb.targets);
  };

  stage.forward(*be, *self, 0, mb, Tensor{});
  const double loss = stage.loss_sum(0) / kDims.tokens();
  const double expected = ref_loss();
  std::printf("stage loss %.9f, float64 reference %.9f, relative error %.3e\n", loss, expected,
              std::abs(loss - expected) / expected);
  EXPECT_NEAR(loss, expected, 1e-6 * expected);

  stage.backward(*be, *self, 0, mb, Tensor{}, 1.0f / float(kDims.tokens()), [](int) {});
  for (int i : {0, 1, 14, 15, 4}) {  // wte (embedding and output use), wpe, lnf_g, lnf_b, w_qkv
    const double err = scaled_error(to_vec(*be, store[i].grad), finite_difference(&values[std::size_t(i)], ref_loss));
    std::printf("stage backward %-16s: max error / max |grad| = %.3e\n", store[i].decl.name.c_str(), err);
    EXPECT_LT(err, 1e-5) << store[i].decl.name;
  }
}

}  // namespace
}  // namespace foresight::trainer
