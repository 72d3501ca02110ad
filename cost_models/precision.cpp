#include "cost_models/precision.hpp"

namespace foresight::cost_models {

ElementSizes element_sizes(Dtype dtype, Optimizer optimizer, const FrameworkTraits& framework, Dtype optimizer_state,
                           bool fp8_params, bool bf16_optimizer, OptimizerImpl impl) {
  const PrecisionRecipe& r = framework.precision;
  const bool fp32_training = dtype == Dtype::fp32 || dtype == Dtype::tf32;
  ElementSizes s;
  s.activation = fp32_training ? 4.0 : 2.0;
  s.residual = fp32_training ? 4.0 : r.residual_bytes;
  s.weight = (fp32_training || r.fp32_parameters) ? 4.0 : 2.0;
  s.weight_copy = (!fp32_training && r.fp32_parameters && r.autocast_weight_copies) ? 2.0 : 0.0;
  const double state = optimizer_state == Dtype::fp32 ? 4.0 : 2.0;
  // A 16-bit state updates 16-bit weights in place; FP8 parameters keep a 16-bit master.
  s.master = s.weight < 4.0 && (state == 4.0 || fp8_params) ? state : 0.0;
  s.moments = (optimizer == Optimizer::sgd ? 1.0 : 2.0) * state;
  s.grad = s.weight;
  s.gather = fp32_training ? 4.0 : 2.0;
  s.main_grad_copy = 0.0;
  if (r.fp32_main_grads && s.weight < 4.0) {
    if (dtype == Dtype::fp16) s.main_grad_copy = 4.0;  // fp16 grads, fp32 copy in the optimizer
    else s.grad = 4.0;                                 // bf16 (and fp8's bf16 weights): fp32 buffer
  }
  s.reduce = r.reduce_bytes > 0 && !fp32_training ? r.reduce_bytes : s.grad;
  s.accumulate = (r.fp32_main_grads && s.weight < 4.0) ? 4.0 + s.weight + 4.0 : 3.0 * s.grad;
  if (bf16_optimizer && dtype == Dtype::bf16) {
    // BF16_Optimizer (bf16_optimizer.py update_hp_grads): the bf16 gradient cast to fp32 (read 2,
    // write 4), then added into the fp32 buffer (read 4 + 4, write 4). It all-reduces that buffer
    // cast back to bf16 (the engine's communication dtype), so the reduction stays 2 bytes.
    s.accumulate = 2.0 + 4.0 + 4.0 + 4.0 + 4.0;
    s.accumulation_buffer = 4.0;
  }
  // Read the gradient (4), read and write the master (or the parameter itself) and the moments,
  // write the 16-bit model copy where a separate master exists.
  s.optimizer_step = 4.0 + 2.0 * ((s.master > 0 ? s.master : s.weight) + s.moments) + (s.master > 0 ? s.weight : 0.0);
  if (impl != OptimizerImpl::fused && optimizer == Optimizer::adam) {
    // Adam(W) as elementwise passes, with P the stepped parameter (the master where one exists), M
    // a moment and T the sqrt's temporary (both the state's dtype) and G the fp32 gradient, per
    // element:
    //  foreach (torch.optim.AdamW's _multi_tensor_adamw, torch 2.3-2.6): _foreach_mul_ of P by
    //   1 - lr wd (2P), _foreach_lerp_ of the first moment toward G (2M + G), _foreach_mul_ of the
    //   second moment by beta2 (2M), _foreach_addcmul_ of G x G into it (2M + G), _foreach_sqrt
    //   into T (M + T), _foreach_div_ and _foreach_add_ on T (2T each), _foreach_addcdiv_ of the
    //   first moment over T into P (2P + M + T): 4P + 8M + 6T + 2G, in 8 multi-tensor launches;
    //  for-loop (Composer's DecoupledAdamW, composer/optim/decoupled_weight_decay.py adamw,
    //   2023-24), per parameter tensor: the same but m.mul_(beta1).add_(g) (2M, 2M + G) where
    //   foreach lerps: 4P + 10M + 6T + 2G, in 9 kernels a tensor (FSDP1's flat parameters: one per
    //   wrapped block, counted as one group here).
    // 80 and 88 bytes with fp32 parameters and state (the fused kernel's 28); plus the 16-bit copy
    // where a master exists.
    const bool loop = impl == OptimizerImpl::for_loop;
    const double P = s.master > 0 ? s.master : s.weight, M = state, T = state, G = 4.0;
    s.optimizer_step = 4.0 * P + (loop ? 10.0 : 8.0) * M + 6.0 * T + 2.0 * G + (s.master > 0 ? s.weight : 0.0);
    s.optimizer_launches = loop ? 9 : 8;
  }
  if (optimizer == Optimizer::lamb) {
    // LAMB (You et al. 2020, arXiv:1904.00962, Algorithm 2) scales each tensor's Adam-style update
    // by ||w|| / ||update||, so the fused kernel splits in two around the norms (NVIDIA apex
    // csrc/multi_tensor_lamb.cu: LAMBStage1Functor writes the update, multi_tensor_l2norm reads
    // the fp32 weights and the update, LAMBStage2Functor reads both again and writes the
    // weights): beyond Adam's pass, write the update (4), two norm reads (4 + 4), the second
    // stage's reads of weight and update (4 + 4) = 20 bytes per parameter, in 4 launches.
    s.optimizer_step += 20.0;
    s.optimizer_launches = 4;
  }
  s.traffic_scale = fp32_training ? 2.0 : 1.0;
  s.first_accumulation_free = r.grads_freed_between_steps;
  return s;
}

}  // namespace foresight::cost_models
