#include "trainer/offload.hpp"

#include <cmath>

#include "core/error.hpp"

namespace foresight::trainer {

int offloaded_layers(double fraction, int layers) {
  FORESIGHT_CHECK(fraction >= 0 && fraction <= 1) << "fraction " << fraction;
  return int(std::lround(fraction * layers));
}

void ActivationOffload::offload(Backend& be, std::int64_t key, LayerActivations& acts) {
  FORESIGHT_CHECK(!store_.count(key)) << "activations " << key << " offloaded twice";
  std::vector<Saved>& saved = store_[key];
  const std::vector<Tensor*> members = acts.saved();
  for (std::size_t i = 0; i < members.size(); ++i) {
    Tensor& t = *members[i];
    if (!t.defined()) continue;  // dropped by recompute
    Saved s{.member = int(i),
            .rows = t.rows(),
            .cols = t.cols(),
            .type = t.element_type(),
            .data = std::vector<float>(std::size_t(t.numel()))};
    be.copy_to_host(s.data, t);
    const std::int64_t bytes = t.numel() * bytes_per_element(s.type);
    bytes_moved_ += bytes;
    host_bytes_ += bytes;
    saved.push_back(std::move(s));
    t = Tensor{};
  }
  acts.out = Tensor{};
}

void ActivationOffload::restore(Backend& be, std::int64_t key, LayerActivations& acts) {
  auto it = store_.find(key);
  FORESIGHT_CHECK(it != store_.end()) << "activations " << key << " restored before being offloaded";
  const std::vector<Tensor*> members = acts.saved();
  for (Saved& s : it->second) {
    Tensor t = s.type == ElementType::fp32 ? be.zeros_fp32(s.rows, s.cols) : be.zeros(s.rows, s.cols);
    be.copy_from_host(t, s.data);
    const std::int64_t bytes = t.numel() * bytes_per_element(s.type);
    bytes_moved_ += bytes;
    host_bytes_ -= bytes;
    *members[std::size_t(s.member)] = t;
  }
  store_.erase(it);
}

}  // namespace foresight::trainer
