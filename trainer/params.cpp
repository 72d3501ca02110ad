#include "trainer/params.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/error.hpp"

namespace foresight::trainer {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {
std::uint64_t hash_name(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}
}  // namespace

int ParamStore::declare(ParamDecl d) {
  FORESIGHT_CHECK(!values_.defined()) << "declare after allocate: " << d.name;
  const auto [r, c] = local_shape(d);
  Param p;
  p.decl = std::move(d);
  p.offset = elements_;
  elements_ += r * c;
  params_.push_back(std::move(p));
  return int(params_.size()) - 1;
}

std::pair<std::int64_t, std::int64_t> ParamStore::local_shape(const ParamDecl& d) const {
  switch (d.split) {
    case Split::none: return {d.rows, d.cols};
    case Split::rows:
      FORESIGHT_CHECK(d.rows % tp_ == 0) << d.name << " rows " << d.rows << " over tp " << tp_;
      return {d.rows / tp_, d.cols};
    case Split::columns:
      FORESIGHT_CHECK(d.cols % tp_ == 0) << d.name << " cols " << d.cols << " over tp " << tp_;
      return {d.rows, d.cols / tp_};
    case Split::qkv_heads:
      FORESIGHT_CHECK(d.cols % (3 * tp_) == 0) << d.name << " cols " << d.cols << " over 3*tp " << tp_;
      return {d.rows, d.cols / tp_};
  }
  return {0, 0};
}

float ParamStore::initial_value(std::uint64_t seed, const ParamDecl& d, std::int64_t row, std::int64_t col) {
  if (d.init == Init::zeros) return 0.0f;
  if (d.init == Init::ones) return 1.0f;
  // Box-Muller on two 53-bit uniforms drawn from (seed, name, element index).
  const std::uint64_t base = mix64(seed ^ hash_name(d.name)) ^ std::uint64_t(row * d.cols + col) * 2;
  const double u1 = (double(mix64(base) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = double(mix64(base + 1) >> 11) * 0x1.0p-53;
  return float(d.stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void ParamStore::allocate(Backend& backend, std::uint64_t seed, int shards, int shard) {
  FORESIGHT_CHECK(shards >= 1 && shard >= 0 && shard < shards) << shard << " of " << shards;
  shard_elements_ = (elements_ + shards - 1) / shards;
  state_first_ = std::int64_t(shard) * shard_elements_;
  // Master values, main gradients and moments are fp32 whatever the recipe; the working copy is of
  // the activation type, and is the master buffer itself when that is fp32.
  values_ = backend.zeros_fp32(shard_elements_ * shards, 1);
  working_ = backend.precision() == Precision::fp32 ? values_ : backend.zeros(shard_elements_ * shards, 1);
  grads_ = backend.zeros_fp32(shard_elements_ * shards, 1);
  const std::int64_t state = std::max<std::int64_t>(0, std::min(shard_elements_, elements_ - state_first_));
  m_ = backend.zeros_fp32(state, 1);
  v_ = backend.zeros_fp32(state, 1);
  for (Param& p : params_) {
    const auto [r, c] = local_shape(p.decl);
    auto view = [&](const Tensor& flat) { return flat.row_slice(p.offset, r * c).reshaped(r, c); };
    p.value = view(working_);
    p.master = view(values_);
    p.grad = view(grads_);
    std::vector<float> host(std::size_t(r * c));
    auto fill_rows = [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        for (std::int64_t j = 0; j < c; ++j) {
          std::int64_t fi = i, fj = j;
          if (p.decl.split == Split::rows) fi = tp_rank_ * r + i;
          if (p.decl.split == Split::columns) fj = tp_rank_ * c + j;
          if (p.decl.split == Split::qkv_heads) {
            const std::int64_t part = c / 3, which = j / part;  // q, k or v
            fj = which * (part * tp_) + tp_rank_ * part + j % part;
          }
          host[std::size_t(i * c + j)] = initial_value(seed, p.decl, fi, fj);
        }
    };
    // Each value depends only on (seed, name, element): threads over rows give the same bits.
    // A 1.3B model's 1.3e9 draws take about a minute on one core (the first GPU run's 1.3B start
    // ran past its 80 s limit before step 1).
    const std::int64_t threads = std::clamp<std::int64_t>(std::int64_t(std::thread::hardware_concurrency()), 1, 32);
    if (r * c < (std::int64_t(1) << 20) || threads == 1 || r < threads) {
      fill_rows(0, r);
    } else {
      std::vector<std::thread> pool;
      for (std::int64_t t = 0; t < threads; ++t)
        pool.emplace_back(fill_rows, r * t / threads, r * (t + 1) / threads);
      for (std::thread& th : pool) th.join();
    }
    backend.copy_from_host(p.master, host);
  }
  update_working_copy(backend);
}

void ParamStore::update_working_copy(Backend& backend) const {
  if (working_.buffer() != values_.buffer()) backend.copy(working_, values_);
}

}  // namespace foresight::trainer
