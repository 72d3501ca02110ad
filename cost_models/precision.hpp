// Element sizes of one execution, resolved once from the training dtype, the optimizer and the
// framework's precision recipe (core/framework.hpp): what a stored activation, a weight, a
// gradient and the optimizer state take per element, and the HBM bytes the per-parameter passes
// (gradient accumulation, the optimizer step) move. The memory model, the compute model and the
// communication costs all read these, so fp32 training is 4 bytes everywhere and bf16 2.
#pragma once

#include "core/enums.hpp"
#include "core/framework.hpp"

namespace foresight::cost_models {

struct ElementSizes {
  double activation = 2;      // a stored or communicated activation element (16-bit; fp32/tf32: 4)
  double residual = 2;        // the residual stream and the norms' inputs (autocast: fp32)
  double weight = 2;          // a weight as the model stores it
  double weight_copy = 0;     // the 16-bit copy autocast makes of an fp32 weight for a step
  double grad = 2;            // a gradient-buffer element (and what ZeRO reduces: fp32 main grads,
                              // FSDP's reduce_dtype fp32 over fp32 parameters)
  /// A parameter as ZeRO-3 all-gathers it before use: the compute dtype (FSDP MixedPrecision
  /// param_dtype bf16, DeepSpeed's fp16/bf16 partitions), 4 for fp32/tf32 training.
  double gather = 2;
  /// A gradient element as the data-parallel reduction (all-reduce or ZeRO reduce-scatter) moves
  /// it: the gradient buffer's, unless plan.reduce_dtype says otherwise.
  double reduce = 2;
  double master = 4;          // the optimizer's fp32 master copy (0 when weights are fp32)
  double main_grad_copy = 0;  // the optimizer's fp32 copy of 16-bit gradients (Megatron fp16)
  /// An unsharded fp32 buffer the micro-batch gradients are added into beside the 16-bit ones
  /// (DeepSpeed's BF16_Optimizer, plan.bf16_optimizer): 4, else 0.
  double accumulation_buffer = 0;
  double moments = 8;         // optimizer state: Adam or LAMB m and v (8), SGD momentum (4)
  /// HBM bytes per parameter each time one micro-batch's weight gradients are added into the
  /// gradient buffer: Megatron-LM's fp32 main grad, `param.main_grad.add_(param.grad.data)`
  /// (megatron/model/distributed.py): read fp32 (4), read the 16-bit grad (2), write fp32 (4) = 10;
  /// PyTorch's AccumulateGrad, `grad += new_grad` in the parameter dtype: 3 x the grad bytes;
  /// DeepSpeed's BF16_Optimizer, the cast to fp32 (read 2, write 4) and the add into its fp32
  /// buffer (read 4 + 4, write 4): 18.
  double accumulate = 6;
  /// HBM bytes per parameter of the fused optimizer step: read the gradient as fp32 (4), read and
  /// write the fp32 master (or fp32 parameter) and the moments (2 x (4 + moments)), write the
  /// 16-bit model copy where a separate master exists. Fused Adam with 16-bit weights: 30;
  /// PyTorch's fused AdamW on fp32 parameters: 28. LAMB adds 20 (see element_sizes).
  double optimizer_step = 30;
  /// Kernels of one optimizer step (multi-tensor launches): 1 for fused Adam/SGD, 4 for LAMB.
  int optimizer_launches = 1;
  /// Elementwise kernels' traffic relative to the framework's 16-bit recipe (2 for fp32/tf32).
  double traffic_scale = 1;
  /// Per-step HBM bytes of a weight-gradient accumulation pass are paid by micro-batches after
  /// the first only, when gradients are freed between steps (the first backward creates them).
  bool first_accumulation_free = false;
};

/// Element sizes for training in `dtype` with `optimizer` under `framework`'s recipe:
///  - weights: 4 bytes for fp32/tf32 training or fp32 parameters (PyTorch AMP), else 2 (fp8 keeps
///    bf16 weights); a 16-bit per-step copy (weight_copy 2) under autocast;
///  - gradients: in the weight dtype, except Megatron's fp32 main grads for 16-bit weights
///    (bf16: the buffer itself is fp32; fp16: fp16 grads plus an fp32 copy in the optimizer,
///    Megatron-LM docs/distrib_optimizer.md table: 20 / 18 bytes per parameter for fp16 / bf16);
///  - optimizer: fp32 master for 16-bit weights (4), Adam moments 8 or SGD momentum 4 (ZeRO paper
///    sec. 3.1: K = 12 for mixed-precision Adam).
///  - a bf16 optimizer state (training.optimizer_state_dtype): moments of 2 bytes each and no master
///    copy of 16-bit weights (a 2-byte one with FP8 parameters, `fp8_params`);
///  - DeepSpeed's BF16_Optimizer (`bf16_optimizer`, plan.bf16_optimizer): an unsharded fp32
///    gradient buffer beside the bf16 gradients and 18 bytes per parameter per micro-batch to fill it.
///  - PyTorch's foreach Adam(W) (`impl` foreach): each elementwise step a pass of its own (below).
ElementSizes element_sizes(Dtype dtype, Optimizer optimizer, const FrameworkTraits& framework,
                           Dtype optimizer_state = Dtype::fp32, bool fp8_params = false, bool bf16_optimizer = false,
                           OptimizerImpl impl = OptimizerImpl::fused);

}  // namespace foresight::cost_models
