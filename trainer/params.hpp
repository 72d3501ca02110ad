// The parameters a rank holds, in one flat buffer each for values, gradients and the two AdamW
// moments (fp32 master weights), so that gradient buckets, the optimizer and checkpoints work on
// contiguous ranges. Initialisation is counter-based: element (i, j) of the *full* tensor gets a
// value that depends only on (seed, parameter name, i, j), so every tensor-parallel slice of every
// layout holds exactly the numbers a single rank would, without generating the full tensor.
// With ZeRO-1 (the distributed optimizer) the moments exist only for this data-parallel rank's
// shard of the flat buffer (Rajbhandari et al. 2020 sec. 5.1). Under a bf16 recipe the model reads a
// bf16 working copy of the values (a second flat buffer, rounded from the fp32 master values after
// every change to them); under fp32 the two are one buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/backend.hpp"

namespace foresight::trainer {

/// How the full (rows, cols) tensor is split over the tensor-parallel ranks.
enum class Split {
  none,      // replicated on every tensor-parallel rank
  rows,      // rank r holds rows [r*rows/tp, (r+1)*rows/tp) (row-parallel, vocabulary-parallel)
  columns,   // rank r holds a contiguous block of columns (column-parallel)
  qkv_heads  // columns are [q | k | v], each split by heads: rank r holds its heads of each
};

enum class Init { normal, zeros, ones };

/// One parameter as the full model defines it, and how this rank holds it.
struct ParamDecl {
  std::string name;        // unique in the model, e.g. "layers.3.w_qkv"; seeds its values
  std::int64_t rows = 0;   // full shape
  std::int64_t cols = 0;
  Split split = Split::none;
  Init init = Init::zeros;
  float stddev = 0;        // for Init::normal
  bool weight_decay = false;
  /// Counted in the global gradient norm on this rank (false for tensor-parallel replicas other
  /// than tp rank 0, and for the last stage's copy of the tied embedding).
  bool in_grad_norm = true;
  /// An MoE expert's weight: held by one rank of the expert-parallel group, so its gradient is
  /// summed over the expert-data-parallel group (not all data-parallel ranks) and counted in the
  /// gradient norm by every expert-parallel rank.
  bool expert = false;
};

struct Param {
  ParamDecl decl;
  Tensor value;             // what the model reads: the working copy (bf16 under a bf16 recipe)
  Tensor master;            // the fp32 master values the optimizer steps (value itself under fp32)
  Tensor grad;              // fp32 main gradient
  // (local shape, views into the flat buffers)
  std::int64_t offset = 0;  // of this parameter in the flat buffers
};

class ParamStore {
 public:
  ParamStore(int tp, int tp_rank) : tp_(tp), tp_rank_(tp_rank) {}

  /// Registers a parameter (before allocate()); returns its index. Order = order in the buffers.
  int declare(ParamDecl d);
  /// Allocates the flat buffers and writes every parameter's initial values. The optimizer
  /// state covers shard `shard` of `shards` equal shards of the buffer (1 shard: all of it); the
  /// value buffer is padded to shards * shard size so shards can be all-gathered.
  void allocate(Backend& backend, std::uint64_t seed, int shards = 1, int shard = 0);

  const Param& operator[](int i) const { return params_[std::size_t(i)]; }
  int size() const { return int(params_.size()); }
  std::int64_t elements() const { return elements_; }
  /// The fp32 master values and the fp32 main gradients of every parameter: (elements(), 1).
  Tensor values() const { return values_.row_slice(0, elements_); }
  Tensor grads() const { return grads_.row_slice(0, elements_); }
  /// The padded master value and gradient buffers, (shards * shard_elements(), 1), for
  /// all-gathering value shards and reduce-scattering gradients (the padding stays zero).
  const Tensor& padded_values() const { return values_; }
  const Tensor& padded_grads() const { return grads_; }
  /// Writes the working copy from the master values (rounding them to bf16); a no-op when the two
  /// are one buffer. Call after every change to the master values.
  void update_working_copy(Backend& backend) const;
  /// The optimizer state: moments of elements [state_first(), state_first() + shard_elements())
  /// of the flat buffer (clipped at elements()).
  const Tensor& first_moments() const { return m_; }
  const Tensor& second_moments() const { return v_; }
  std::int64_t state_first() const { return state_first_; }
  std::int64_t shard_elements() const { return shard_elements_; }

  /// Local (rows, cols) of a declared parameter on this rank.
  std::pair<std::int64_t, std::int64_t> local_shape(const ParamDecl& d) const;
  /// The initial value of element (row, col) of the full tensor (same on every rank).
  static float initial_value(std::uint64_t seed, const ParamDecl& d, std::int64_t row, std::int64_t col);

 private:
  int tp_, tp_rank_;
  std::vector<Param> params_;
  std::int64_t elements_ = 0;
  std::int64_t state_first_ = 0, shard_elements_ = 0;
  Tensor values_, working_, grads_, m_, v_;
};

/// A 64-bit mix of x (splitmix64 finaliser, Steele et al. 2014): the trainer's counter-based RNG.
std::uint64_t mix64(std::uint64_t x);

}  // namespace foresight::trainer
