#include "cost_models/precision.hpp"

namespace foresight::cost_models {

ElementSizes element_sizes(Dtype dtype, Optimizer optimizer, const FrameworkTraits& framework) {
  const PrecisionRecipe& r = framework.precision;
  const bool fp32_training = dtype == Dtype::fp32 || dtype == Dtype::tf32;
  ElementSizes s;
  s.activation = fp32_training ? 4.0 : 2.0;
  s.residual = fp32_training ? 4.0 : r.residual_bytes;
  s.weight = (fp32_training || r.fp32_parameters) ? 4.0 : 2.0;
  s.weight_copy = (!fp32_training && r.fp32_parameters) ? 2.0 : 0.0;
  s.master = s.weight < 4.0 ? 4.0 : 0.0;
  s.moments = optimizer == Optimizer::adam ? 8.0 : 4.0;
  s.grad = s.weight;
  s.gather = fp32_training ? 4.0 : 2.0;
  s.main_grad_copy = 0.0;
  if (r.fp32_main_grads && s.weight < 4.0) {
    if (dtype == Dtype::fp16) s.main_grad_copy = 4.0;  // fp16 grads, fp32 copy in the optimizer
    else s.grad = 4.0;                                 // bf16 (and fp8's bf16 weights): fp32 buffer
  }
  s.accumulate = (r.fp32_main_grads && s.weight < 4.0) ? 4.0 + s.weight + 4.0 : 3.0 * s.grad;
  s.optimizer_step = 4.0 + 2.0 * (4.0 + s.moments) + (s.master > 0 ? s.weight : 0.0);
  s.traffic_scale = fp32_training ? 2.0 : 1.0;
  s.first_accumulation_free = r.grads_freed_between_steps;
  return s;
}

}  // namespace foresight::cost_models
