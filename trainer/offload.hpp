// Activation offload (plan.offload.activations): the activations a layer saves for its backward
// are moved into a host store right after the layer's forward and brought back just before its
// backward, so they occupy no backend memory in between (ZeRO-Offload / Megatron's CPU activation
// offloading). On the CPU backend the "host store" is separate host memory outside the backend's
// allocator, filled through copy_to_host / copy_from_host: the same calls a CUDA backend would make
// on a side stream into pinned memory. The layers whose activations move are the first
// round(fraction * layers) of each model chunk: their activations wait longest for the backward.
// Left out: overlapping the copies with compute (the CPU backend copies synchronously), and the
// MoE router's and experts' activations (they stay on the backend).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/layer.hpp"

namespace foresight::trainer {

/// How many of `layers` layers offload for `fraction` in [0, 1] (round to nearest).
int offloaded_layers(double fraction, int layers);

class ActivationOffload {
 public:
  /// Copies every saved tensor of `acts` (except `out`, which the backward does not read and the
  /// next layer keeps as its input) to the host store under `key` and releases them on the backend.
  void offload(Backend& be, std::int64_t key, LayerActivations& acts);
  /// Brings the tensors stored under `key` back into `acts` (fresh backend tensors) and forgets them.
  void restore(Backend& be, std::int64_t key, LayerActivations& acts);
  bool holds(std::int64_t key) const { return store_.count(key) != 0; }

  /// Bytes copied to the host and back since the last reset (each direction counted; a bf16
  /// element counts 2 bytes, what a device moves, though the CPU backend copies floats).
  std::int64_t bytes_moved() const { return bytes_moved_; }
  void reset_counter() { bytes_moved_ = 0; }
  /// Bytes the host store holds now.
  std::int64_t host_bytes() const { return host_bytes_; }

 private:
  struct Saved {
    int member = 0;  // index into LayerActivations::saved()
    std::int64_t rows = 0, cols = 0;
    ElementType type = ElementType::fp32;  // restored as it was (bf16 activations, fp32 statistics)
    std::vector<float> data;
  };
  std::map<std::int64_t, std::vector<Saved>> store_;
  std::int64_t bytes_moved_ = 0;
  std::int64_t host_bytes_ = 0;
};

}  // namespace foresight::trainer
