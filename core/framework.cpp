#include "core/framework.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "core/error.hpp"
#include "core/plan.hpp"

namespace foresight {

namespace {

/// Megatron-LM 2021-22's elementwise kernels per (tokens, hidden) element, 16-bit: each layer
/// norm reads and writes the stream (2 + 2; backward reads input and gradient and writes the
/// gradient, 8 per norm, as Apex's fused kernels do), the fused bias-dropout-add reads the
/// branch and the residual and writes the sum and a 1-byte mask (7 per site, backward the same),
/// the fused bias-GeLU reads and writes the (tokens, ffn) tensor (4; backward reads input and
/// gradient, writes the gradient: 6). The embedding gathers a word row and a position row and
/// writes their sum (3 x 2; backward the same). The vocab-parallel cross-entropy, per (tokens,
/// local vocabulary) element, pass by pass as Megatron-LM runs it on `logits.float()` (mpu/
/// cross_entropy.py of 2021, the same in Megatron-Core core_r0.8.0 tensor_parallel/cross_entropy.py
/// without --cross-entropy-loss-fusion): the cast (read 2, write 4), the row max (read 4), the max
/// subtracted in place (4 + 4), exp in place (4 + 4), the row sum (read 4), the division into the
/// softmax it saves (4 + 4): 38 in 6 launches; backward the softmax scaled in place by the loss
/// gradient (4 + 4) and the cast's gradient back to 16 bits (4 + 2): 14 in 2 launches.
/// Bias-gradient reductions are not counted for these entries (a < 1% term of the backward;
/// notes/status.md).
constexpr ElementwiseTraffic kMegatron2021Traffic{
    .norms_forward = 8, .norms_backward = 16, .norms_launches_forward = 2, .norms_launches_backward = 2,
    .residual_forward = 14, .residual_backward = 14, .residual_launches_forward = 2, .residual_launches_backward = 2,
    .activation_forward = 4, .activation_backward = 6,
    .embedding_forward = 6, .embedding_backward = 6, .embedding_launches = 2,
    .loss_forward = 38, .loss_backward = 14, .loss_launches_forward = 6, .loss_launches_backward = 2};

/// TeraPipe's layer as its evaluation code runs it (zhuohan123/terapipe @ e2cc51f,
/// transformer_models.py ModelParallelTransformerLayer and ModelParallelMultiheadLMAttentionWithCache,
/// mpu/layers.py; eager PyTorch 1.7-1.8 on fp16 modules under --mixed-precision; no dropout
/// anywhere), kernel by kernel:
///  norms: two nn.LayerNorm in fp16, read 2 and write 2 each (8 in 2 launches); backward each
///   norm's input-gradient kernel (read dy and x, write dx: 6) and gamma/beta kernel (read dy and
///   x: 4), 20 in 4 launches.
///  residual, per (tokens, hidden) element: at each site the in-place `x += y` (read 2 + 2, write
///   2) and, after the row-parallel all-reduce, the bias add `output_ + bias` (read 2, write 2):
///   20 in 4 launches; backward the two gradient paths summed at each fork (read 2 + 2, write 2):
///   12 in 2.
///  layout, per (tokens, hidden / t) element: F.linear on a 3-D input is a matmul followed by an
///   in-place bias add (PyTorch 1.7 torch/nn/functional.py), so the QKV output's bias (3 x 4);
///   q * scaling (2 + 2); the new K and V copied into the attention cache (_AssignCache: 2 x 4);
///   the attention output's transpose_(0, 1).contiguous() (2 + 2): 28 in 5 launches. Backward the
///   chunk's gradient, a cat of dq, dk and dv (read 6, write 6), the scaling's (2 + 2), and the
///   cache slice's gradient: a zero-filled K and V buffer (2 x 2) with the slice copied in (2 x
///   4): 28 in 5 launches. (For a token slice that buffer spans the whole sequence, and the slice's
///   cache gradient is added into the prefix's: O(sequence) per slice, kv_cache_slice_gradient;
///   transformer_models.py backward_step.)
///  activation, per (tokens, ffn / t) element: fc1's bias add and relu_, both in place (2 + 2
///   each): 8; backward relu's threshold_backward (read dy and y, write dx): 6.
///  bias gradients: each Linear's, a reduction reading its output gradient (2 per element).
///  scores (the unfused attention, per query-key element): the causal mask added in place (read
///   the scores and the broadcast mask, write the scores: 6), F.softmax(..., dtype=torch.float32)
///   (ATen's half-to-float softmax: read 2, write 4) and .type_as back to fp16 (read 4, write 2):
///   18; backward the cast's gradient to fp32 (read 2, write 4) and the half-to-float softmax
///   backward (read y and dy in fp32, write dx in fp16: 10): 16.
///  No embedding or loss: TeraPipe times transformer layers only (the last stage's loss is the mean
///  of its output).
constexpr ElementwiseTraffic kTerapipe2021Traffic{
    .norms_forward = 8, .norms_backward = 20, .norms_launches_forward = 2, .norms_launches_backward = 4,
    .residual_forward = 20, .residual_backward = 12, .residual_launches_forward = 4, .residual_launches_backward = 2,
    .layout_forward = 28, .layout_backward = 28, .layout_launches_forward = 5, .layout_launches_backward = 5,
    .kv_cache_slice_gradient = true,
    .activation_forward = 8, .activation_backward = 6,
    .bias_grad = 2,
    .score_forward = 18, .score_backward = 16};

/// Eager PyTorch under torch.autocast(bf16) on fp32 parameters, kernel by kernel, per (tokens,
/// hidden) element (../shared/bench/torch_gpt_baseline.py's block: pre-LayerNorm, SDPA, GeLU-tanh):
///  forward: each LayerNorm runs in fp32 (autocast's fp32 list) reading and writing 4 + 4, and its
///  output is cast to bf16 for the next Linear (read 4, write 2): 2 x 14 = 28 in 4 launches; the
///  attention output's transpose(1, 2).reshape copies it (2 + 2); each residual add reads the fp32
///  stream and the bf16 branch and writes fp32 (4 + 2 + 4): 2 x 10 = 20; GeLU reads and writes bf16.
///  backward: per norm, the cast's backward (read 2, write 4), LayerNorm's input-gradient kernel
///  (read dy and x, write dx: 12) and its gamma/beta kernel (read dy and x: 8): 2 x 26 = 52 in 6
///  launches; per residual site, the cast of the fp32 gradient to the bf16 branch (read 4, write
///  2) and the sum of the two gradient paths (read 4 + 4, write 4): 2 x 18 = 36 in 4 launches; the
///  reshape copy's backward (4) and the split's backward, a cat of dq, dk, dv into the (tokens, 3h)
///  gradient (read 6, write 6); GeLU's backward reads x and dy and writes dx (6); each Linear's
///  bias gradient is a reduction reading its bf16 output gradient (2 per output element). Weights:
///  each fp32 weight is cast to bf16 once per forward (autocast's weight cache; read 4, write 2)
///  and its bf16 gradient cast back to fp32 in the backward (read 2, write 4). Embedding: fp32 word
///  and position rows gathered (4 + 4 read, 4 + 4 written) and added (read 8, write 4): 28;
///  backward reads the fp32 gradient for each table's scatter-add (2 x 4, written 4 each): 16.
///  Loss on .float() logits: the cast (read 2, write 4) and log_softmax, whose rows (vocab x 4
///  bytes) exceed the 48 KiB of shared memory a block gets by default, so cunn_SoftMaxForward reads
///  each row three times (max, sum of exponentials, output) and writes it once (16): 22 forward;
///  backward nll_loss's dense gradient (write 4), cunn_SoftMaxBackward's sum pass and output pass
///  (read 4, then read 4 + 4 and write 4: 16) and the cast back to bf16 for the head (read 4,
///  write 2): 26 (aten/src/ATen/native/cuda/SoftMax.cu; notes/research-pytorch.md).
///  Strided (ElementwiseTraffic::layout_strided_*): the transpose(1, 2).reshape copy reads a
///  transposed view, and so does its backward (4 each way); the cat of dq, dk, dv reads the
///  gradients in the layout SDPA's backward gives them, (B, T, H, D), contiguous once transposed
///  back, so it batches its copies at the streaming rate.
constexpr ElementwiseTraffic kPytorchAutocastTraffic{
    .norms_forward = 28, .norms_backward = 52, .norms_launches_forward = 4, .norms_launches_backward = 6,
    .residual_forward = 20, .residual_backward = 36, .residual_launches_forward = 2, .residual_launches_backward = 4,
    .layout_forward = 4, .layout_backward = 16, .layout_launches_forward = 1, .layout_launches_backward = 2,
    .activation_forward = 4, .activation_backward = 6,
    .bias_grad = 2,
    .embedding_forward = 28, .embedding_backward = 16, .embedding_launches = 3,
    .loss_forward = 22, .loss_backward = 26, .loss_launches_forward = 2, .loss_launches_backward = 3,
    .weight_cast_forward = 6, .weight_cast_backward = 6,
    .layout_strided_forward = 4, .layout_strided_backward = 4};

/// The same model under torch.compile (the whole module compiled, Inductor's default fusions;
/// ../shared/bench/torch_gpt_baseline.py's compile rows). Inductor fuses each residual add with the
/// LayerNorm that follows it and the norm's cast: per site read the fp32 stream and the bf16
/// branch (4 + 2), write the fp32 sum and the bf16 normed output (4 + 2) = 12; two sites per
/// layer, two launches, nothing left in the residual entry. Backward per site: one kernel reads the
/// bf16 gradient of the normed output, the fp32 input and the fp32 stream gradient (2 + 4 + 4)
/// and writes the fp32 stream gradient and its bf16 copy for the branch (4 + 2), a second reduces
/// gamma and beta gradients from dy and x (2 + 4): 22 per site, 44 in four launches. Unchanged:
/// the re-layout copies around attention (extern kernels bound them), GeLU (already one kernel
/// each way), bias gradients and autocast's weight casts. Embedding: gather and add fused (read
/// 4 + 4, write 4). Loss: the cast, log_softmax and nll fuse into reductions that read the bf16
/// logits twice (max, then sum of exponentials; 2 + 2) and, in the backward, read them once more
/// and write the bf16 gradient (2 + 2), the partitioner recomputing the softmax rather than
/// saving fp32 probabilities (Inductor's min-cut rematerialisation).
constexpr ElementwiseTraffic kPytorchAutocastCompiledTraffic{
    .norms_forward = 24, .norms_backward = 44, .norms_launches_forward = 2, .norms_launches_backward = 4,
    .residual_forward = 0, .residual_backward = 0, .residual_launches_forward = 0, .residual_launches_backward = 0,
    .layout_forward = 4, .layout_backward = 16, .layout_launches_forward = 1, .layout_launches_backward = 2,
    .activation_forward = 4, .activation_backward = 6,
    .bias_grad = 2,
    .embedding_forward = 12, .embedding_backward = 16, .embedding_launches = 2,
    .loss_forward = 4, .loss_backward = 4, .loss_launches_forward = 2, .loss_launches_backward = 1,
    .weight_cast_forward = 6, .weight_cast_backward = 6};

/// llm-foundry's MPT block as its benchmarks run it (mosaicml/llm-foundry @ b2a43a147:
/// scripts/train/benchmarking/submit_benchmarks.py forces norm_type low_precision_layernorm;
/// llmfoundry/models/layers/norm.py, blocks.py, attention.py, mpt/modeling_mpt.py), under autocast
/// with FSDP1 handing it bf16 parameters. Norms: LPLayerNorm runs F.layer_norm in bf16 with
/// autocast off (its input and weight casts are no-ops on bf16 tensors): read 2, write 2 per norm,
/// 8 in 2 launches; backward the input-gradient kernel (read dy and x, write dx: 6) and the
/// gamma/beta kernel (read dy and x: 4), 20 in 4 launches. Residual: x + dropout(b) in bf16 with
/// resid_pdrop 0 (ATen's dropout returns its input at p = 0): 2 + 2 + 2 per site, 12 in 2 launches;
/// backward the two gradient paths added at each fork (6 per site). Layout: the Triton flash kernel
/// takes q, k, v as strided views of the fused QKV output and returns a view, so no copy forward;
/// backward the chunk's gradient is a cat of dq, dk, dv into the (tokens, 3h) buffer (read 6,
/// write 6): 12 in 1 launch. GeLU and bias gradients as eager PyTorch. Embedding: bf16 word and
/// position rows gathered (2 + 2 each) and added (2 + 2 + 2): 14; backward the two scatter-adds
/// into bf16 gradients (2 + 2 each): 8. Loss: the default loss_fn fused_crossentropy is
/// flash-attn's CUDA cross-entropy (modeling_mpt.py raises if it is not installed), reading the
/// bf16 logits for the row maximum and the sum of exponentials (2 + 2) and, backward, reading them
/// once more and writing their bf16 gradient (2 + 2): 4 and 4 in one launch each. Beside it the
/// training metrics: ComposerMPTCausalLM's train_metrics default to LanguageCrossEntropy and
/// LanguagePerplexity (use_train_metrics true; the benchmark configs do not change it), and
/// Composer updates both after every micro-batch's backward on the cached logits
/// (composer v0.16 trainer.py _train_microbatch -> _eval_train_metrics, under the autocast
/// context), each its own torch.nn.CrossEntropyLoss (LanguagePerplexity subclasses
/// LanguageCrossEntropy's update): cross_entropy autocasts to fp32 (the cast: read 2, write 4)
/// and log_softmax reads the fp32 rows three times (vocab x 4 bytes exceeds a block's shared
/// memory) and writes them once (16): 22 per metric, 44 for the two in 4 launches, forward only.
/// The loss entries carry both: 48 in 5 launches forward, 4 in 1 backward. Weights:
/// autocast's casts as eager PyTorch (6 + 6 per parameter under DDP; under FSDP,
/// cost_models/roofline.cpp weight_cast_bytes prices FSDP1's gradient flattening and cast).
constexpr ElementwiseTraffic kLlmFoundryMptTraffic{
    .norms_forward = 8, .norms_backward = 20, .norms_launches_forward = 2, .norms_launches_backward = 4,
    .residual_forward = 12, .residual_backward = 12, .residual_launches_forward = 2, .residual_launches_backward = 2,
    .layout_forward = 0, .layout_backward = 12, .layout_launches_forward = 0, .layout_launches_backward = 1,
    .activation_forward = 4, .activation_backward = 6,
    .bias_grad = 2,
    .embedding_forward = 14, .embedding_backward = 8, .embedding_launches = 3,
    .loss_forward = 48, .loss_backward = 4, .loss_launches_forward = 5, .loss_launches_backward = 1,
    .weight_cast_forward = 6, .weight_cast_backward = 6};

/// torchtitan's Llama block in eager mode (torchtitan models/llama/model.py and models/norms.py,
/// 2024): FSDP2 computes in bf16 (MixedPrecisionPolicy param_dtype bf16), no autocast; per
/// (tokens, hidden) element unless stated:
///  RMSNorm, written as PyTorch ops: x.float() (read 2, write 4), pow(2) (4 + 4), mean (read 4),
///  x * rsqrt (4 + 4), type_as (4 + 2), * weight (2 + 2): 36 per norm, 72 for two in 16 launches.
///  Its autograd backward: * weight (dy * w: 2 + 2; the weight gradient's dy * y and its sum:
///  2 + 2 + 2, read 2), type_as (2 + 4), x * rsqrt (g * r: 4 + 4; the sum of g * x: 4 + 4 + 4,
///  read 4), mean's expand-divide (write 4), pow (autograd's pow_backward, g * (2 * x.pow(1)), where
///  pow with exponent 1 is a copy: 4 + 4, 4 + 4, 4 + 4 + 4 in 3 launches), the two paths into
///  x.float() added (4 + 4 + 4), the float() cast back (4 + 2): 92 per norm, 184 in 28 launches
///  (76 and 24 until session 50, which counted pow's backward as one multiply).
///  RoPE on q and k (apply_rotary_emb): float() (2 + 4), complex multiply (4 + 4), type_as (4 + 2)
///  = 20 per element of q and k, and 20 back, 6 launches (Llama 3 8B, 8 KV heads of 32: 25 per
///  hidden element); repeat_kv's copies of k and v to every query head when there are fewer KV
///  heads (read each KV element, write each repeated one: 2 + 2 per pair; backward the sums; 8B:
///  5 per hidden element each way); the attention output's transpose copy (2 + 2, backward 2 + 2):
///  the layout entry, 1 launch.
///  Residual adds in bf16 (2 + 2 + 2) at two sites: 12; backward the two gradient paths added at
///  each fork: 12.
///  SwiGLU, silu(w1 x) * w3 x: silu (2 + 2) and the product (2 + 2 + 2) = 10 per ffn element,
///  stated per element as the gated layer model counts it (x 1.5): 6.67; backward the product's two
///  gradients (2 + 2 + 2 each) and silu's (2 + 2 + 2) = 18, stated as 18 / (5/3) = 10.8.
///  Weights: none here. FSDP2's mixed precision hands the layers bf16 parameters (no autocast
///  casts), and its copies (each unit's all-gather output copied out into the parameters, every
///  gather; each bf16 gradient copied into the fp32 reduce-scatter input) are priced per unit where
///  the gathers are (FrameworkTraits::fsdp2_unit_copies, sim/cost_data_parallel.cpp). Until session
///  30 this entry held them as well (4 forward, 10 backward per parameter): a double count.
///  Embedding: nn.Embedding gather in bf16 (2 + 2); backward the scatter-add (read 2, write 4 in
///  fp32 accumulation, 2 launches): 6. Loss: cross_entropy on .float() logits as in eager PyTorch.
///  Strided passes (ElementwiseTraffic::rope_strided_*; TensorIterator vectorizes its loads only
///  when every operand is contiguous, aten/src/ATen/native/cuda/CUDALoops.cuh): the complex
///  multiply reads freqs_cis broadcast over the heads (8 of the RoPE's 20 each way; its gradient,
///  g * conj(freqs_cis), the same); the output's transpose copy and its backward (the layout's 4
///  each way); repeat_kv's copies from an expanded view and the backward's sums over the repeats
///  (reductions, not elementwise kernels: taking them at the copies' rate is an assumption). The
///  casts read and write contiguous tensors.
constexpr ElementwiseTraffic kTorchtitanEagerTraffic{
    .norms_forward = 72, .norms_backward = 184, .norms_launches_forward = 16, .norms_launches_backward = 28,
    .residual_forward = 12, .residual_backward = 12, .residual_launches_forward = 2, .residual_launches_backward = 2,
    .layout_forward = 4, .layout_backward = 4, .layout_launches_forward = 1, .layout_launches_backward = 1,
    .rope_forward = 20, .rope_backward = 20, .rope_launches = 6, .kv_repeat = 2,
    .activation_forward = 10.0 / 1.5, .activation_backward = 18.0 / (5.0 / 3.0),
    .bias_grad = 0,
    .embedding_forward = 4, .embedding_backward = 6, .embedding_launches = 2,
    .loss_forward = 22, .loss_backward = 26, .loss_launches_forward = 2, .loss_launches_backward = 3,
    .weight_cast_forward = 0, .weight_cast_backward = 0, .norms_eager_chain = true,
    .rope_strided_forward = 8, .rope_strided_backward = 8, .layout_strided_forward = 4, .layout_strided_backward = 4,
    .kv_repeat_strided = true};

/// torchtitan with --training.compile: each TransformerBlock compiled on its own (torchtitan
/// apply_compile, fullgraph per block), so fusions stay inside a block. Forward: attention_norm one
/// kernel (read 2, write 2); the first residual add fused with ffn_norm (read 2 + 2, write 2 + 2);
/// the block's last residual add (2 + 2 + 2): 18 in 3 launches, stated as norms 12 and residual 6.
/// Backward: per norm one fused kernel reading x, dy and the stream gradient arriving at the fork
/// and writing the stream gradient (2 + 2 + 2 + 2), and the weight-gradient reduction re-reading x
/// and dy (2 + 2): 24 in 4 launches, residual entry 0. RoPE fused with its casts (read 2, write 2
/// per q and k element, 2 launches); repeat_kv and the output transpose still copy (SDPA is an
/// extern kernel), as in eager mode. SwiGLU in one
/// kernel each way (2 + 2 + 2 forward, 2 + 2 + 2 + 2 + 2 backward: 4 and 6 in the gated model's
/// units). Outside the blocks (the embedding and the loss) nothing changes.
constexpr ElementwiseTraffic kTorchtitanCompiledTraffic{
    .norms_forward = 12, .norms_backward = 24, .norms_launches_forward = 2, .norms_launches_backward = 4,
    .residual_forward = 6, .residual_backward = 0, .residual_launches_forward = 1, .residual_launches_backward = 0,
    .layout_forward = 4, .layout_backward = 4, .layout_launches_forward = 1, .layout_launches_backward = 1,
    .rope_forward = 4, .rope_backward = 4, .rope_launches = 2, .kv_repeat = 2,
    .activation_forward = 4, .activation_backward = 6,
    .bias_grad = 0,
    .embedding_forward = 4, .embedding_backward = 6, .embedding_launches = 2,
    .loss_forward = 22, .loss_backward = 26, .loss_launches_forward = 2, .loss_launches_backward = 3,
    .weight_cast_forward = 0, .weight_cast_backward = 0};

/// IBM's fms-fsdp (foundation-model-stack/fms-fsdp, 2024) training the ibm-fms LLaMA
/// (foundation-model-stack/foundation-model-stack fms/models/llama.py, fms/modules/attention.py,
/// positions.py, layernorm.py, feedforward.py @ f33fdd2, 2024-02) in eager mode; FSDP1 hands the
/// blocks bf16 parameters (MixedPrecision bfSixteen), no autocast. Per (tokens, hidden) element
/// unless stated, what differs from torchtitan's eager block above:
///  RoPE (RotaryEmbedding.adjusted_qk) multiplies each (re, im) pair by a 2 x 2 rotation matrix
///  in fp32 and sums: q.float() (read 2, write 4), the broadcast mul into a (.., D/2, 2, 2) fp32
///  tensor (read 4, write 8), .sum(5) (read 8, write 4), type_as (read 4, write 2) = 36 per element
///  of q and k in 4 launches each; its autograd backward mirrors it (the cast's gradient 2 + 4, the
///  product's gradient materialised 4 + 8 and summed over the broadcast pair 8 + 4, the cast back
///  4 + 2) = 36, against the complex multiply's 20 each way. Strided: the broadcast product and the
///  sum over a size-2 dimension, 24 of the 36 each way (taking the reduction's rate to be the
///  broadcast product's is an assumption: no measurement of it was found).
///  Loss: train_utils.py calls nn.CrossEntropyLoss on the bf16 logits (no .float()): log_softmax
///  reads each 64 KB row three times and writes it once (6 + 2), nll_loss reads one element a row:
///  8 in 2 launches; backward nll_loss's dense bf16 gradient (write 2), the log-softmax backward's
///  sum pass over the incoming gradient (read 2) and its output pass (read the gradient and the
///  saved output, write: 2 + 2 + 2): 10 in 3 launches.
///  The norms (LayerNormParameterized with use_high_precision_pow: x.float(), pow, mean, rsqrt,
///  type_as, * weight), the GQA expansion (expand + flatten copies K and V to every head), the
///  attention output's transpose copy, the residual adds and the GLU (silu(wg x) * w1 x) are
///  torchtitan's ops to the byte.
constexpr ElementwiseTraffic kFmsEagerTraffic = [] {
  ElementwiseTraffic t = kTorchtitanEagerTraffic;
  t.rope_forward = t.rope_backward = 36;
  t.rope_strided_forward = t.rope_strided_backward = 24;
  t.rope_launches = 8;
  t.loss_forward = 8;
  t.loss_backward = 10;
  t.loss_launches_forward = 2;
  t.loss_launches_backward = 3;
  return t;
}();

/// fms-fsdp with use_torch_compile: torch.compile over the FSDP1-wrapped model (main_training.py),
/// whose FSDP hooks break the graph at every wrapped LLaMABlock, so Inductor fuses within a block
/// as torchtitan's per-block compile does (its RoPE one kernel reading q and k in 16 bits and
/// writing them back). The loss stays eager outside the model, as above.
constexpr ElementwiseTraffic kFmsCompiledTraffic = [] {
  ElementwiseTraffic t = kTorchtitanCompiledTraffic;
  t.loss_forward = kFmsEagerTraffic.loss_forward;
  t.loss_backward = kFmsEagerTraffic.loss_backward;
  t.loss_launches_forward = kFmsEagerTraffic.loss_launches_forward;
  t.loss_launches_backward = kFmsEagerTraffic.loss_launches_backward;
  return t;
}();

/// The GPT of Dao-AILab/flash-attention's training code (flash_attn/models/gpt.py with the
/// training/configs/experiment/pile/*-flash.yaml switches: fused_dropout_add_ln, fused_mlp,
/// fused_bias_fc, residual_in_fp32, use_flash_attn; flash_attn/ops/layer_norm.py, fused_dense.py,
/// losses/cross_entropy.py), under Lightning's bf16 autocast; per (tokens, hidden) element unless
/// stated:
///  Dropout + residual add + LayerNorm are one kernel per site (dropout_add_ln_fwd): read the branch
///  output (bf16, 2) and the fp32 residual stream (4), write the new fp32 stream (4), the bf16
///  normed output (2) and the 1-byte dropout mask: 13 a site, 26 for the two sites in 2 launches,
///  with nothing left for a separate residual kernel. Backward (dropout_add_ln_bwd): read the normed
///  output's gradient (2), the saved fp32 stream (4), the stream's gradient from above (fp32, 4)
///  and the mask (1), write the branch's gradient (2) and the stream's (4): 17 a site, 34, in 4
///  launches (each with the small reduction of its gamma/beta partial sums).
///  No re-layout copies: the packed qkv GEMM output goes to flash_attn_qkvpacked_func as a view and
///  its (b, s, heads, d) output is the projection's input as a view; the backward writes dqkv packed.
///  GeLU: fc1's cuBLASLt epilogue adds the bias and applies GeLU, writing both the pre-activation
///  and the output (2 bytes per ffn element beyond a plain GEMM's output); the backward's dGeLU is
///  fc2's data-gradient epilogue reading the saved pre-activation (2); bias gradients come from the
///  weight-gradient GEMMs' epilogues (linear_bias_wgrad): none priced apart.
///  Weights: FusedDense and FusedMLP cast the fp32 weights to bf16 every forward (read 4, write 2)
///  and autograd casts the bf16 weight gradient back into the fp32 .grad (read 2, write 4), as
///  eager autocast does. Embedding: GPT2Embeddings' word and position lookups and their sum in fp32,
///  as eager PyTorch (28, backward 16). Loss: flash-attn's CrossEntropyLoss(inplace_backward=True)
///  reads the bf16 logits once for the log-sum-exp and, in the backward, reads them and writes the
///  gradient over them (2 and 4, one launch each).
constexpr ElementwiseTraffic kFlashAttnGptTraffic = [] {
  ElementwiseTraffic t = kPytorchAutocastTraffic;  // embedding and weight casts as eager autocast
  t.norms_forward = 26;
  t.norms_backward = 34;
  t.norms_launches_forward = 2;
  t.norms_launches_backward = 4;
  t.residual_forward = t.residual_backward = 0;
  t.residual_launches_forward = t.residual_launches_backward = 0;
  t.layout_forward = t.layout_backward = t.layout_strided_forward = t.layout_strided_backward = 0;
  t.layout_launches_forward = t.layout_launches_backward = 0;
  t.activation_forward = t.activation_backward = 2;
  t.bias_grad = 0;
  t.loss_forward = 2;
  t.loss_backward = 4;
  t.loss_launches_forward = t.loss_launches_backward = 1;
  return t;
}();

constexpr double kDdpBucketBytes = 25.0 * 1048576.0;  // torch DDP bucket_cap_mb default 25 (MiB)

/// An entry with what most of the frameworks of the table share, so that each entry below states
/// only where it differs: Megatron-LM-style kernels and unfused attention, mixed precision as the
/// ZeRO paper describes it (16-bit weights and gradients, fp32 master and Adam state; sec. 3.1),
/// dropout stored, whole-tensor pipeline sends, gradients reduced in place (no extra bucket), an
/// overlapped reduction's last bucket the size of torch DDP's, every feature but token slicing.
FrameworkTraits entry(Framework id, const char* name, const char* version, const char* source) {
  FrameworkTraits t;
  t.id = id;
  t.name = name;
  t.version = version;
  t.source = source;
  t.attention = AttentionImpl::unfused;
  t.moe_dispatch = MoeDispatch::permute;
  t.elementwise = kMegatron2021Traffic;
  t.dp_overlap_bucket_bytes = kDdpBucketBytes;
  return t;
}

/// An entry that starts as a copy of `base` (a framework built on another's execution), under its
/// own identity.
FrameworkTraits derived(const FrameworkTraits& base, Framework id, const char* name, const char* version,
                        const char* source) {
  FrameworkTraits t = base;
  t.id = id;
  t.name = name;
  t.version = version;
  t.source = source;
  return t;
}

std::array<FrameworkTraits, 11> make_table() {
  FrameworkTraits megatron = entry(Framework::megatron, "megatron", "Megatron-LM v2.x-v3.0 (2021-22)",
                                   "Narayanan et al. 2021 (SC21); Korthikanti et al. 2022; NVIDIA/Megatron-LM v2.5-v3.0 "
                                   "(megatron/p2p_communication.py, megatron/model/distributed.py, docs/distrib_optimizer.md)");
  megatron.precision.fp32_main_grads = true;
  megatron.sums_tied_embedding_copies = true;
  megatron.fused_softmax = true;
  // Scatter/gather: each TP rank sends 1/t of the activation and the receiver all-gathers it over
  // NVLink, both directions (Narayanan et al. 2021 sec. 4.1). (SC21's runs used torch DDP,
  // run_table_1.sh --DDP-impl torch: the 25 MiB bucket of an overlapped reduction.)
  megatron.send_forward = megatron.send_backward = PipelineSend::split_then_gather;
  // Megatron-LM 2021-22: the distributed optimizer (ZeRO-1, docs/distrib_optimizer.md) is its only
  // sharding, and pipelines need num_layers divisible by the pipeline size (megatron/arguments.py).
  megatron.max_zero = megatron.max_zero_with_pipeline = 1;
  megatron.uneven_pipeline = false;
  // Nothing moves to the host: Megatron-LM 2021-22 has no CPU optimizer and no activation offload
  // (--optimizer-cpu-offload arrived in core_v0.12.0, megatron/training/arguments.py).
  megatron.optimizer_offload = false;
  megatron.optimizer_offload_refusal =
      "Megatron-LM 2021-22 steps its optimizer on the GPU (--optimizer-cpu-offload came with Megatron-Core v0.12: "
      "plan.framework megatron-core, or deepspeed's offload_optimizer)";
  megatron.activation_offload = false;
  megatron.activation_offload_refusal =
      "Megatron-LM 2021-22 keeps activations on the GPU (Megatron-Core's cpu_offloading or DeepSpeed's "
      "cpu_checkpointing move them: plan.framework megatron-core or deepspeed)";
  // Its only sharding is the distributed optimizer over the whole data-parallel group.
  megatron.hybrid_sharding = false;
  // --activations-checkpoint-method uniform | block with --activations-checkpoint-num-layers (the
  // SC21 scripts pass the former; block checkpoints the first N layers of each pipeline stage and
  // runs the rest normally, megatron/model/transformer.py _checkpointed_forward), later renamed
  // --recompute-method / --recompute-num-layers: partial_recompute stays on.

  FrameworkTraits megatron_core = megatron;
  megatron_core.launcher = Launcher::megatron_core;
  // Megatron-Core: --decoder-first/last-pipeline-num-layers; Megatron-FSDP (--use-megatron-fsdp)
  // for ZeRO-2/3-style sharding.
  megatron_core.uneven_pipeline = true;
  // --gradient-accumulation-fusion is Megatron-LM's default since 2022 (arguments.py
  // --no-gradient-accumulation-fusion); Megatron-Core passes it to Transformer Engine's linear
  // layers as fuse_wgrad_accumulation.
  megatron_core.gradient_accumulation_fusion = true;
  // Interleaved pipeline sends overlapped with compute (overlap_p2p_comm): the training CLI's
  // default with virtual stages; Megatron-Bridge's CommOverlapConfig sets it for VP > 1
  // (v0.2.0 src/megatron/bridge/training/comm_overlap.py), NeMo 1.0's yamls per model.
  megatron_core.p2p_overlap = true;
  // ZeRO-2/3 is Megatron-FSDP (--use-megatron-fsdp with --data-parallel-sharding-strategy
  // optim_grads / optim_grads_params, core_v0.14-0.15; the Megatron-Bridge 25.09 and 25.11
  // performance recipes run it), not the older torch FSDP2 path (--use-torch-fsdp2, which asserts
  // pp 1 and no gradient accumulation fusion). megatron/training/arguments.py asserts neither for
  // Megatron-FSDP: training.py wraps each pipeline (and virtual) chunk on its own, and the
  // weight-gradient GEMMs write into its reduce-scatter buckets (TE's get_main_grad for FSDP
  // parameters; arguments.py only warns that TE must support it). Expert parallelism is not wired
  // at the core_v0.14.0 and core_v0.15.0 tags (megatron_fsdp/utils.py FSDPDistributedIndex returns
  // no expert groups: "Expert parallel is not supported"); from core_v0.16.0 it is: MegatronFSDP
  // requires an expert data-parallel group when the module holds expert parameters
  // (megatron_fsdp.py, get_fsdp_group(is_expert_parallel=True)) and shards the experts over it
  // (sharded_expert_parallel; the experts' gathers and reduce-scatters run in plan.expert_dp()'s
  // group, sim/cost_data_parallel.cpp). Each TransformerLayer is gathered for
  // its forward and again for its backward, with the next one prefetched on a side stream, its
  // gathered parameters views of the bucket (no copy out), and its gradients reduce-scattered
  // every micro-batch into the persistent shard (megatron_fsdp.py _pre_forward_param_unshard,
  // _post_forward, _pre_backward, _post_backward; param_and_grad_buffer.py). optim_grads_params
  // always reshards after the forward (no SHARD_GRAD_OP mode: optim_grads is plan.zero 2).
  megatron_core.max_zero = 3;
  megatron_core.max_zero_with_pipeline = 3;
  megatron_core.zero3_keep_gathered = false;
  megatron_core.zero3_edges_gathered_per_step = true;
  megatron_core.zero3_grad_copy_unless_fused = true;
  megatron_core.zero3_unsharded_grad_units = 2;
  megatron_core.hsdp_outer_reduce_per_step = true;
  megatron_core.id = Framework::megatron_core;
  megatron_core.name = "megatron-core";
  megatron_core.version =
      "Megatron-Core r0.8 with Transformer Engine (2024); MoE as core_r0.13-r0.17 run it; ZeRO-2/3 as Megatron-FSDP "
      "(core_v0.14-0.16; with expert parallelism from core_v0.16)";
  megatron_core.source = "NVIDIA/Megatron-LM core_r0.8.0 (megatron/core/pipeline_parallel/p2p_communication.py, "
                         "megatron/core/distributed/, docs/source/api-guide/distributed_optimizer.md); core_v0.14.0 and "
                         "core_v0.15.0, core_v0.16.0 (megatron/core/distributed/fsdp/); Transformer Engine v2.7-2.9 "
                         "(pytorch/cpu_offload.py); notes/research-megatron-core.md";
  // TEDotProductAttention: flash-attn v2 on A100; on H100 Transformer Engine disables FlashAttention
  // when its cuDNN FusedAttention backend applies (TE v1.8 attention.py).
  megatron_core.attention = AttentionImpl::flash;
  // Megatron-LM 2021's kernels, plus RoPE as kernels of its own on q and k for rotary models
  // (core_r0.8.0 models/common/embeddings/rotary_pos_embedding.py apply_rotary_pos_emb, with
  // --apply-rope-fusion Transformer Engine's fused_apply_rotary_pos_emb, which NeMo's Llama and
  // Megatron-Bridge's Qwen recipes turn on): read 2, write 2 per element each way, one launch for q
  // and one for k.
  megatron_core.elementwise.rope_forward = megatron_core.elementwise.rope_backward = 4;
  megatron_core.elementwise.rope_launches = 2;
  megatron_core.newer_attention_from_cc = 9.0;
  megatron_core.newer_attention = AttentionImpl::cudnn;
  // Every TP rank sends the whole boundary tensor (scatter/gather was removed in 2023, commit
  // 39b83c7953; p2p_communication.py at core_r0.8.0); with sequence parallelism its own shard.
  megatron_core.send_forward = megatron_core.send_backward = PipelineSend::whole;
  // DistributedDataParallelConfig.bucket_size, in parameters: max(40M, 1M x the data-parallel size
  // with context parallelism) where --ddp-bucket-size leaves it unset (core_r0.8.0
  // megatron/core/distributed/distributed_data_parallel.py).
  megatron_core.dp_overlap_bucket_bytes = 0;
  megatron_core.dp_overlap_bucket_elements = 40e6;
  megatron_core.dp_overlap_bucket_elements_per_rank = 1e6;
  megatron_core.dp_shared_embedding_own_bucket = true;
  megatron_core.dp_buckets_first_stage_only = true;
  // --overlap-param-gather (core_r0.8.0 megatron/core/distributed/param_and_grad_buffer.py: each
  // bucket's all-gather dispatched before the forward reaches it).
  megatron_core.param_gather_overlap = true;
  // --context-parallel-size with Transformer Engine's p2p ring attention (core_r0.8.0,
  // megatron/core/parallel_state.py; TE attention.py AttnFuncWithCPAndKVP2P).
  megatron_core.context_parallel = true;
  // --cp-comm-type p2p / all_gather / a2a (core_r0.10.0 megatron/training/arguments.py, passed
  // to TE's DotProductAttention; a2a is AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses' exchange).
  megatron_core.cp_comms[int(CpComm::all_to_all)] = megatron_core.cp_comms[int(CpComm::all_to_all_ring)] = true;
  // --fp8-param-gather (megatron/training/arguments.py; the distributed optimizer gathers the FP8
  // parameters, TE keeping each one's FP8 transpose beside it).
  megatron_core.fp8_param_gather = true;
  // --tp-comm-overlap: Transformer Engine userbuffers (TE v1.x, transformer_engine/pytorch/module/base.py).
  megatron_core.tp_overlap = true;
  // Micro-batch-level recompute: Megatron-Core's 1F1B schedule passes checkpoint_activations_microbatch
  // to the forward step (schedules.py, since 2023-04, commit 13c96dc0); NeMo's GPT model honours it.
  // Megatron-LM's own pretrain_gpt.py forward step does not take the argument (NVIDIA/Megatron-LM
  // issue #767), which the megatron entry (2021-22) predates anyway.
  megatron_core.microbatch_recompute = true;
  // --expert-tensor-parallel-size (core_r0.10.0 on, megatron/core/parallel_state.py
  // initialize_model_parallel: expert groups built over tp x cp x dp independently of attention's).
  megatron_core.expert_folding = true;
  // Any layer count per virtual stage: --account-for-embedding-in-pipeline-split and
  // --account-for-loss-in-pipeline-split (core_r0.11+) and --pipeline-model-parallel-layout
  // (core_r0.13+, megatron/core/transformer/pipeline_parallel_layer_layout.py).
  megatron_core.uneven_interleaved = true;
  megatron_core.moe_probs_all_to_all = true;
  megatron_core.moe_dispatch = MoeDispatch::alltoall;
  // TEGroupedMLP builds linear_fc2 with skip_bias_add=True and adds the bias afterwards
  // (megatron/core/transformer/moe/experts.py _apply_bias, core_v0.15.0-core_v0.17.0, added with
  // GPT-OSS support in a329dd6d, 2025-09): torch.split of the output and the probabilities by
  // tokens per expert, t + b * p per expert, torch.cat.
  megatron_core.moe_fc2_bias_per_expert = true;
  megatron_core.ep_overlap = true;
  megatron_core.moe_te_fusions = true;
  megatron_core.defers_embedding_wgrad = true;
  megatron_core.deepep = true;
  megatron_core.recompute_modules = true;
  megatron_core.mtp = true;
  // --cross-entropy-loss-fusion (core_r0.8.0, megatron/core/fusions/fused_cross_entropy.py) and
  // --cross-entropy-fusion-impl te (core_v0.12.0, language_module.py compute_language_model_loss).
  megatron_core.cross_entropy_fusion = true;
  // --fp8-recipe delayed | tensorwise (TE Float8CurrentScaling, core_r0.13+) through
  // Transformer Engine's modules (megatron/core/extensions/transformer_engine.py).
  megatron_core.fp8_transformer_engine = true;
  // --fp8-recipe blockwise (core_v0.13+, TE Float8BlockScaling).
  megatron_core.fp8_blockwise = true;
  megatron_core.fp8_amax_reduction = true;
  // Under FP8, Transformer Engine's Linear and LayerNormLinear save their quantized inputs (the
  // norms' outputs, the projection's and FC2's inputs; TE v2.x module/linear.py and
  // layernorm_linear.py save the FP8 tensor the GEMM read), its fused attention its 16-bit output
  // beside the projection's FP8 copy, and Megatron-Core's fused bias-SwiGLU its 16-bit input.
  // (Checked against Megatron-Bridge's GB200 Llama 3 70B FP8 recipe: micro-batch 2 x 8192 tokens
  // with 40 of 80 layers offloaded runs on a 186 GB part, which 16-bit inputs would not fit.)
  megatron_core.activations.fp8_linear_inputs = true;
  megatron_core.activations.fp8_activation_inputs = false;
  megatron_core.activations.fp8_attention_output_bytes = 3.0;
  // --optimizer-cpu-offload (core_v0.12.0+, megatron/core/optimizer/cpu_offloading/
  // hybrid_optimizer.py, torch.optim.AdamW on the host): arguments.py asserts
  // --use-precision-aware-optimizer with it, and OptimizerConfig asserts that one "only supported
  // with distributed optimizer", so ZeRO-1 only (under Megatron-FSDP the precision-aware
  // optimizer gets no decoupled gradients: param_and_grad_buffer.py update_main_grads, and
  // Megatron-Bridge turns it off there, "cannot work with FSDP together").
  megatron_core.optimizer_offload = true;
  megatron_core.optimizer_offload_min_zero = megatron_core.optimizer_offload_max_zero = 1;
  // TransformerConfig.cpu_offloading (Transformer Engine's CPU offload of layer activations, set
  // through NeMo): its __post_init__ raises "Currently there is no support for Pipeline
  // parallelism with CPU offloading", "CPU offloading does not work when activation recomputation
  // is enabled" and requires cpu_offloading_num_layers < num_layers (core_r0.8.0 to core_v0.15.0
  // megatron/core/transformer/transformer_config.py).
  megatron_core.activation_offload = true;
  megatron_core.optimizer_offload_refusal = megatron_core.activation_offload_refusal = "";
  megatron_core.activation_offload_without_recompute = true;
  megatron_core.activation_offload_with_pipeline = false;
  megatron_core.activation_offload_every_layer = false;
  // Transformer Engine's offload handler: the offloaded layers go out one group at a time on a
  // D2H stream and come back the same way in the backward (cpu_offload.py; Megatron-Core marks
  // its fused SwiGLU input for offload too, fused_bias_swiglu.py), each copy freed as its window
  // ends: one layer's reload is staged at most.
  megatron_core.activation_offload_windows = true;
  // --num-distributed-optimizer-instances (core_v0.10+, megatron/training/arguments.py): the
  // distributed optimizer sharded within groups and replicated across them.
  megatron_core.hybrid_sharding = true;

  FrameworkTraits deepspeed = entry(Framework::deepspeed, "deepspeed",
                                    "DeepSpeed v0.5.4-v0.6 pipeline engine with Megatron-DeepSpeed (2021-22); ZeRO-3 as v0.6.2 runs it (2022), "
                                    "or with its prefetch trace complete (plan.zero3_prefetch, 2023); "
                                    "Ulysses sequence parallelism (v0.10.2+)",
                                    "microsoft/DeepSpeed v0.5.0-v0.6.5 (deepspeed/runtime/pipe/engine.py, "
                                    "runtime/zero/stage2.py), v0.6.0-v0.9.4 (runtime/zero/stage3.py, "
                                    "partitioned_param_coordinator.py), v0.10.2+ (deepspeed/sequence/layer.py); "
                                    "notes/research-deepspeed-pipeline.md, notes/research-deepspeed-zero3.md");
  deepspeed.moe_dispatch = MoeDispatch::einsum;
  deepspeed.launcher = Launcher::megatron_deepspeed;
  // Activations and gradients partitioned over TP and all-gathered by the receiver
  // (is_pipe_partitioned = is_grad_partitioned = is_model_parallel, PartitionedTensor.full(),
  // pipe/engine.py from v0.5.4 through v0.6.5 and the bf16 branch BLOOM ran); _exec_recv_grads
  // restores the partitioned output with part_output.full(). Before PR #1407 (2021-09-29, v0.5.4)
  // every TP rank sent the whole gradient (is_grad_partitioned = False); which of the two
  // MT-NLG's timed runs had is not recorded, so the engine every later DeepSpeed has is priced.
  deepspeed.send_forward = deepspeed.send_backward = PipelineSend::split_then_gather;
  deepspeed.pipe_grads_partitioning = true;  // plan.partitioned_pipe_grads false: the whole gradient
  deepspeed.regathers_output_for_backward = true;
  deepspeed.zero_reduction = ZeroReduction::all_reduce;
  // Its stage 2 (non-pipeline engine: the pipeline engine runs stage 1 at most) reduces each bucket
  // to the ranks owning its partitions: with contiguous_gradients and reduce_scatter (both on by
  // default) average_tensor sends every owner's slice with dist.reduce(grad_slice, dst=owner)
  // (stage2.py v0.5.8, stage_1_and_2.py to v0.12.3), a reduce-scatter's traffic; stage 1 all-reduces
  // (the engine turns contiguous_gradients off for it: buffered_reduce_fallback). From v0.12.4
  // (use_multi_rank_bucket_allreduce, default on) stage 2 all-reduces whole buckets too, later than
  // this entry's releases.
  deepspeed.zero2_reduction = ZeroReduction::reduce_scatter;
  deepspeed.sums_tied_embedding_copies = true;
  deepspeed.fused_softmax = true;  // Megatron-DeepSpeed's model code (megatron/model/fused_softmax.py)
  deepspeed.bf16_optimizer = true;  // deepspeed/runtime/bf16_optimizer.py (v0.6.3+), as BLOOM ran it
  deepspeed.dp_bucket_elements = 5e8;  // reduce_bucket_size default (DeepSpeed config docs, zero_optimization)
  deepspeed.zero_whole_reduce_buckets = true;
  // Under overlap_comm the backward reduces its gradient bucket each time reduce_bucket_size
  // elements have filled it (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads):
  // the overlapped reduction's bucket is that one, not DDP's (overlap_bucket_elements).
  deepspeed.dp_overlap_bucket_bytes = 0;
  deepspeed.dp_bucket_flushes_before_overflow = true;
  deepspeed.dp_overlap_with_pipeline = false;
  deepspeed.dp_overlap_refusal =
      "DeepSpeed's pipeline engine reduces gradients after the pipeline flush (it forces overlap_comm off); set it false";
  // Only ZeRO-2 reduces during the backward: stage 0 all-reduces and stage 1 reduces at the
  // accumulation boundary (engine.py allreduce_gradients, v0.5.8 to v0.12; "Overlap and contiguous
  // grads are meaningless in stage 1 and are ignored"), and stage 3 reduces per module beside its
  // gathers (cost_sharded_parameters), hidden only with a complete prefetch trace (zero3_prefetch
  // below, plan.zero3_prefetch).
  deepspeed.dp_overlap_min_zero = deepspeed.dp_overlap_max_zero = 2;
  // MoE: Megatron-DeepSpeed's GPTModelPipe builds dense layers only (its MoE scripts pass
  // --no-pipeline-parallel, megatron/model/gpt_model.py @0c6bd284, 2021-11), and DeepSpeed refuses
  // ZeRO-3 on a model with MoE layers ("MoE not supported with Stage 3", engine.py v0.5.8 to v0.14).
  deepspeed.moe_with_pipeline = deepspeed.moe_zero3 = false;
  deepspeed.dp_overlap_zero_refusal =
      "stage 0 and 1 reduce at the accumulation boundary, engine.py allreduce_gradients; overlap_comm is ignored there";
  // One schedule, TrainSchedule = 1F1B (deepspeed/runtime/pipe/schedule.py); no sequence
  // parallelism or selective recompute (both arrived with Korthikanti 2022); ZeRO-2/3 are refused
  // with pipelines (pipe/engine.py).
  deepspeed.schedules[int(Schedule::gpipe)] = deepspeed.schedules[int(Schedule::interleaved)] = false;
  deepspeed.sequence_parallel = deepspeed.selective_recompute = false;
  deepspeed.max_zero_with_pipeline = 1;
  // Its pipeline engine checkpoints every activation_checkpoint_interval-th layer boundary of the
  // whole stage (pipe/module.py, PipelineModule.forward): no way to keep some layers' activations.
  deepspeed.partial_recompute = false;
  // PipelineModule(partition_method=...): 'parameters' by default, Megatron-DeepSpeed's
  // GPTModelPipe passes 'type:transformer' (BLOOM-176B: 70 layers on 12 stages).
  deepspeed.partition_method = true;
  // It has no per-stage layer counts (no Megatron --decoder-first/last-pipeline-num-layers, no
  // explicit list in v0.5): uneven splits come only from partition_method.
  deepspeed.uneven_pipeline = false;
  // ZeRO stage 3 as v0.6-v0.9 run it (PR #1453, 2022: coalesced all-gathers on their own stream;
  // notes/research-deepspeed-zero3.md): per-module fetches, reduce_bucket_size buckets, the
  // gathered parameters copied out, three passes over each gradient before its reduce-scatter,
  // param_persistence_threshold 1e5 (runtime/zero/config.py default).
  deepspeed.zero3_unit = Zero3Unit::module;
  deepspeed.zero3_reduce_bucket_elements = 5e8;
  deepspeed.zero3_gather_copies = true;
  deepspeed.zero3_reduce_copy_passes = 3;
  deepspeed.zero3_large_gradients_alone = true;
  deepspeed.zero3_backward_host_serial = true;
  deepspeed.zero3_lone_gathers_in_place = true;
  deepspeed.zero3_persistence_elements = 1e5;
  // Communication not overlapped with compute: gathers on demand, nothing kept for reuse. The
  // Azure + DeepSpeed runs (v0.6.2, docs/_posts/2022-07-26-deepspeed-azure.md) show it: their
  // TFLOP/s against micro-batch (Fig. 5, 175B at 128-1024 GPUs, micro-batch 1-32) follow
  // compute + a fixed per-step cost, t(mb) = mb c + X, which no overlap leaves (at micro-batch 32
  // each module computes ~10x its gather, yet X stays 10-15 s). In the v0.6.2 source that is the
  // coordinator without a complete trace: no prefetch (partitioned_param_coordinator.py:250),
  // every parameter released after its module (:305-308); a reading of the code found no
  // steady-state trigger for it (notes/research-zero3-runs.md, "Overlap").
  deepspeed.zero3_prefetch = false;
  // Later releases complete the trace: the trace fixes of v0.6.3-v0.7.7 (PRs #1901, #1916, #2016,
  // #2550), and ZeRO++'s tutorial logs of 2023-03 (18B on 64 V100s, comm-bound: backward 6459 ms
  // against forward 3356 ms, where gathering every recomputed layer twice would give about three
  // forwards' worth; docs/_tutorials/zeropp.md). plan.zero3_prefetch true selects them.
  deepspeed.zero3_prefetch_choice = true;
  deepspeed.zero3_keep_gathered = false;
  // stage3_max_reuse_distance's default; it acts only with a complete trace (prefetches_zero3).
  deepspeed.zero3_reuse_elements = 1e9;
  deepspeed.activation_offload_per_layer = true;
  // zero_optimization.offload_optimizer (cpu_offload in v0.3-v0.5): a mode of its ZeRO optimizers,
  // stage 1 to 3 (DeepSpeed config docs: "Valid for ZeRO stage 1, 2, 3"; v0.5.8 engine.py passes
  // cpu_offload to the stage 1/2 optimizer and the offload configs to stage 3), under the pipeline
  // engine too (stage 1 there).
  deepspeed.optimizer_offload_min_zero = 1;
  // ZeRO-Offload's stage 1/2 optimizer copies each reduced IPG bucket's gradients straight into
  // its pinned fp32 partition on the host (stage_1_and_2.py copy_grads_in_partition under
  // cpu_offload: async_inplace_copy_grad_to_fp32_buffer_from_gpu, or
  // async_accumulate_grad_in_cpu_via_gpu between micro-batches) and allocates no device-side
  // grads_in_partition; the gradients live in the IPG buffer it reuses (Ren et al. 2021, sec. 4.1).
  // Stage 1 registers no backward hooks (they need partition_gradients or overlap_comm, and the
  // engine ignores overlap_comm at stage 1), so its .grad fills whole before reduce_gradients
  // moves it through the bucket: only stage 2 streams (FrameworkTraits::streams_gradients_to_host).
  // Under cpu_offload stages 1 and 2 also keep temp_grad_buffer_for_gpu_offload, the largest
  // parameter's size in the 16-bit dtype, on the device for the whole run.
  deepspeed.offloaded_optimizer_streams_gradients = true;
  deepspeed.offloaded_gradient_path = OffloadGradientPath::deepspeed;
  // activation_checkpointing.cpu_checkpointing moves the checkpoints of DeepSpeed's checkpointed
  // layers to the host (runtime/activation_checkpointing/checkpointing.py, CheckpointFunction), so
  // only under full recompute.
  deepspeed.activation_offload_needs_full_recompute = true;
  // DeepSpeedCPUAdam (ZeRO-Offload): one fused pass per element, reading the fp32 gradient, weight,
  // exp_avg and exp_avg_sq and writing the last three (csrc/adam/cpu_adam_impl.cpp, Step_1/Step_AVX):
  // 28 bytes; the fp16 copy for the device goes through a tile-sized staging buffer that stays in
  // cache.
  deepspeed.host_optimizer_bytes_per_param = 28;
  // Sequence parallelism as DeepSpeed-Ulysses (v0.10.2+, deepspeed/sequence/layer.py
  // DistributedAttention; Megatron-DeepSpeed --ds-sequence-parallel-size): all-to-alls around
  // attention, ZeRO sharded over the data x sequence ranks. Megatron-DeepSpeed builds its sequence
  // groups from consecutive ranks as it does its tensor groups, and lets the sequence size stand in
  // for the tensor size when forming data-parallel groups (megatron/core/parallel_state.py
  // initialize_model_parallel @f4157bea), so it is run with tp 1. _SeqAllToAll copies each tensor
  // once: heads grouped by destination before the collective (transpose().contiguous()), or the
  // sequence chunks put back in order after it.
  deepspeed.context_parallel = true;
  deepspeed.cp_comms[int(CpComm::ring)] = deepspeed.cp_comms[int(CpComm::all_gather)] = false;
  deepspeed.cp_comms[int(CpComm::all_to_all)] = true;
  deepspeed.cp_with_tensor_parallel = false;
  deepspeed.cp_all_to_all_copies = 1;

  FrameworkTraits terapipe = entry(Framework::terapipe, "terapipe", "zhuohan123/terapipe (2021)",
                                   "Li et al. 2021 (arXiv:2102.07988); zhuohan123/terapipe (transformer_models.py, "
                                   "mpu/initialize.py, test_transformer_terapipe.py)");
  terapipe.has_embedding_and_head = terapipe.last_stage_embedding_copy = false;
  terapipe.elementwise = kTerapipe2021Traffic;
  // One whole tensor per stage boundary, from the last TP rank of a stage to the first of the
  // next over a 2-rank NCCL group, which broadcasts it to its TP group over NVLink.
  terapipe.send_forward = terapipe.send_backward = PipelineSend::one_rank_broadcast;
  terapipe.dp_bucket_bytes = kDdpBucketBytes;
  terapipe.dp_overlap = terapipe.dp_overlap_with_pipeline = false;
  terapipe.dp_overlap_refusal = "TeraPipe all-reduces gradients after the backward; set it false";
  // GPipe-order pipelining with or without token slices, Megatron tensor parallelism without
  // sequence parallelism, optional checkpointing of the attention core only
  // (--checkpoint-gradients), no sharded optimizer.
  terapipe.schedules[int(Schedule::one_f_one_b)] = terapipe.schedules[int(Schedule::interleaved)] = false;
  terapipe.schedules[int(Schedule::terapipe)] = true;
  terapipe.sequence_parallel = terapipe.full_recompute = terapipe.partial_recompute = false;
  terapipe.max_zero = terapipe.max_zero_with_pipeline = 0;
  terapipe.uneven_pipeline = false;
  terapipe.optimizer_offload = terapipe.activation_offload = false;
  terapipe.optimizer_offload_refusal = terapipe.activation_offload_refusal =
      "TeraPipe keeps everything on the GPU (zhuohan123/terapipe has no offload)";

  FrameworkTraits pytorch = entry(Framework::pytorch, "pytorch",
                                  "eager PyTorch 2.x: autocast bf16 on fp32 parameters, SDPA, fused AdamW, DDP",
                                  "../shared/bench/torch_gpt_baseline.py; PyTorch docs (Automatic Mixed Precision op "
                                  "lists, DistributedDataParallel bucket_cap_mb, Optimizer.zero_grad set_to_none); "
                                  "notes/research-pytorch.md");
  pytorch.attention = AttentionImpl::flash;
  pytorch.elementwise = kPytorchAutocastTraffic;
  pytorch.precision = {.fp32_parameters = true, .residual_bytes = 4, .fp32_main_grads = false,
                       .grads_freed_between_steps = true, .autocast_weight_copies = true};
  pytorch.compiled_elementwise = kPytorchAutocastCompiledTraffic;
  pytorch.activations = {.dropout = false, .attention_output_copy = true, .logits_bytes = 12};
  pytorch.dp_bucket_bytes = kDdpBucketBytes;
  // torch.distributed.tensor.experimental.context_parallel over SDPA (torchtitan, PyTorch 2.5+):
  // PyTorch's rotaters, fp32 dK/dV ring and eager merges, whatever the model (cp_torch_sdpa); its
  // K/V as SDPA receives them, taken as after a repeat_kv (torchtitan's and Hugging Face's Llama
  // attention both repeat before calling SDPA).
  pytorch.context_parallel = true;
  pytorch.cp_torch_sdpa = true;
  // Async TP (torch._inductor micro-pipeline TP, torchtitan enable_async_tensor_parallel): an
  // Inductor pass, so only under torch.compile (torchtitan's parallelize_llama.py raises "Async TP
  // requires --training.compile" otherwise).
  pytorch.tp_overlap = true;
  pytorch.tp_overlap_needs_compile = true;
  // Tensor parallelism through DTensor on batch-first (b, s, h) activations.
  pytorch.tp_batch_first_relayout = true;
  // Its optimizer steps the fp32 parameters where they live, on the GPU, and autograd keeps saved
  // tensors there (torch.autograd.graph.save_on_cpu would move them; the baseline does not).
  pytorch.optimizer_offload = pytorch.activation_offload = false;
  pytorch.optimizer_offload_refusal =
      "eager PyTorch steps its fp32 parameters on the GPU (FSDP's CPU offload moves the parameters too, which "
      "plan.offload does not describe; deepspeed or megatron-core offload the optimizer alone)";
  pytorch.activation_offload_refusal =
      "the eager PyTorch baseline keeps saved activations on the GPU (deepspeed, megatron-core or foresight-train "
      "offload them)";

  // MosaicML's llm-foundry (2023-24): Composer's FSDP1 (FULL_SHARD) under autocast bf16 over fp32
  // parameters, as eager PyTorch above, on its MPT models. What differs: its elementwise traffic
  // (kLlmFoundryMptTraffic: bf16 norms and residual stream, no attention re-layout, the fused
  // cross-entropy and Composer's training metrics), its attention kernel (the benchmarks' attn_impl
  // triton: FlashAttention's Triton kernel, the GPU file's flash_triton figure where it has one,
  // else its flash figure scaled by the calibrated fsdp_h100_attention_scale on H100), and its
  // loss: ComposerMPTCausalLM's default loss_fn fused_crossentropy, flash-attn's CUDA
  // cross-entropy, reads the bf16 logits and writes a bf16 gradient, 4 bytes per logit at the
  // backward's peak instead of eager F.cross_entropy's 12 (llmfoundry/models/mpt/modeling_mpt.py).
  // No tensor or context parallelism in its benchmarks.
  FrameworkTraits llm_foundry = derived(
      pytorch, Framework::llm_foundry, "llm-foundry", "llm-foundry with Composer FSDP1, MPT models, PyTorch 2.0-2.3 (2023-24)",
      "mosaicml/llm-foundry (llmfoundry/models/mpt/modeling_mpt.py loss_fn, attn_config; scripts/train/benchmarking); "
      "Composer FSDP docs (sharding_strategy, mixed_precision DEFAULT / PURE)");
  llm_foundry.activations.logits_bytes = 4;
  llm_foundry.elementwise = kLlmFoundryMptTraffic;
  llm_foundry.attention = AttentionImpl::flash_triton;
  // MPT's low_precision_layernorm runs the norms in bf16 (autocast off around F.layer_norm), so the
  // residual stream and the norms' inputs stay 16-bit; Composer's FSDP gathers bf16 parameters
  // (mixed_precision DEFAULT and PURE: param_dtype bf16), so autocast keeps no weight copies.
  llm_foundry.precision.residual_bytes = 2;
  llm_foundry.precision.autocast_weight_copies = false;
  llm_foundry.context_parallel = false;
  llm_foundry.tp_overlap = false;
  // Composer trains with DDP or FSDP only (mosaicml/llm-foundry issue #1743, 2025-03: "only
  // Zero3/DP (i.e. FSDP, or HSDP) are supported"): no pipeline stages and, in this entry's releases,
  // no tensor parallelism (its tp_config arrived with PR #1521, 2024-09, and stayed experimental);
  // FSDP's strategies shard everything between steps, either releasing the gathered parameters
  // after each unit's forward (FULL_SHARD, zero 3) or keeping them to its backward (SHARD_GRAD_OP,
  // zero 3 with reshard_after_forward false), never the optimizer state alone.
  llm_foundry.pipeline_parallel = false;
  llm_foundry.fsdp1_reduce_passes = true;
  llm_foundry.tensor_parallel = false;
  // Its benchmarks run eager (no compile_config in scripts/train/benchmarking); Inductor's fusions
  // of the MPT block are not described, so no compiled mode (pytorch's entry describes its own block).
  llm_foundry.compiled_elementwise.reset();
  llm_foundry.zero1 = false;
  llm_foundry.zero2_is_shard_grad_op = true;
  // Composer's FSDP cpu_offload is FSDP1's CPUOffload(offload_params=True): the sharded parameters
  // and their gradients live on the host and the optimizer steps there. plan.offload.optimizer
  // moves only the optimizer state, so it does not describe that run.
  llm_foundry.optimizer_offload_refusal =
      "Composer's FSDP CPU offload moves the sharded parameters and gradients to the host too, which "
      "plan.offload does not describe (deepspeed or megatron-core offload the optimizer alone)";
  llm_foundry.activation_offload_refusal =
      "llm-foundry's benchmarks keep activations on the GPU (deepspeed, megatron-core or foresight-train "
      "offload them)";

  // torchtitan (Liang et al. 2024, arXiv:2410.06511; pytorch/torchtitan 2024): FSDP2 over bf16
  // compute with fp32 sharded parameters, gradients reduced in fp32 (MixedPrecisionPolicy
  // param_dtype bf16, reduce_dtype fp32), SDPA attention, no dropout, the eager or compiled Llama
  // block above, per-op or whole-block activation checkpointing, TP with async TP, context
  // parallelism over SDPA, and torch.distributed.pipelining schedules (GPipe, 1F1B, interleaved)
  // with uneven splits (pipeline_parallel_split_points).
  FrameworkTraits torchtitan = entry(Framework::torchtitan, "torchtitan",
                                     "torchtitan with FSDP2, PyTorch 2.4-2.8 (2024-25)",
                                     "pytorch/torchtitan (models/llama/model.py, models/norms.py, parallelisms/"
                                     "parallelize_llama.py apply_fsdp / apply_ac / apply_compile, 2024); Liang et al. "
                                     "2024 (arXiv:2410.06511)");
  // SDPA's flash backend, first in its backend list on H100 (torchtitan models/attention.py; cuDNN
  // only on B200, pytorch/torchtitan#1196): FlashAttention-2 as PyTorch 2.4-2.8 vendor it. PyTorch
  // made cuDNN attention opt-in in 2.5.1 (pytorch/pytorch#138522) and the default on sm90 only from
  // 2.9 with a new enough cuDNN (pytorch/pytorch#162073).
  torchtitan.attention = AttentionImpl::flash2;
  torchtitan.elementwise = kTorchtitanEagerTraffic;
  torchtitan.compiled_elementwise = kTorchtitanCompiledTraffic;
  torchtitan.precision = {.fp32_parameters = true, .residual_bytes = 2, .fp32_main_grads = false,
                          .grads_freed_between_steps = true, .autocast_weight_copies = false};
  torchtitan.activations = {.dropout = false, .attention_output_copy = true, .logits_bytes = 12};
  torchtitan.dp_bucket_bytes = kDdpBucketBytes;
  torchtitan.context_parallel = true;
  // Its Attention.forward calls repeat_kv on keys and values before F.scaled_dot_product_attention
  // (torchtitan/models/llama/model.py), and context_parallel wraps that SDPA call.
  torchtitan.cp_torch_sdpa = true;
  torchtitan.tp_overlap = true;
  torchtitan.tp_overlap_needs_compile = true;
  torchtitan.op_selective_recompute = true;
  // selective_ac_option "op" is its selective mode; Korthikanti's attention-core recompute is not.
  torchtitan.selective_recompute = false;
  torchtitan.partial_recompute = false;
  torchtitan.min_zero = 3;
  torchtitan.tp_needs_sequence_parallel = true;
  // Its TP plan shards the (b, s, h) norm inputs with Shard(1) (parallelize_llama.py
  // apply_tp: SequenceParallel, PrepareModuleInput desired_input_layouts Replicate from Shard(1)).
  torchtitan.tp_batch_first_relayout = true;
  // parallelize_llama.py: enable_float8_tensorwise_tp = float8 linears and not a rowwise recipe
  // ("float8 all-gather with TP is only supported for tensorwise float8 scaling recipes").
  torchtitan.fp8_tensorwise_tp_gather = true;
  // float8.enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp (torchtitan
  // job config, torchao Float8LinearConfig; its 405B preset turns both on).
  torchtitan.fp8_param_gather = true;
  // apply_fsdp: fully_shard per TransformerBlock, the embedding and the output (FSDP2).
  torchtitan.fsdp2_unit_copies = true;
  // Its pipelines are torch.distributed.pipelining's schedules, whose stages reduce FSDP2
  // gradients once after the last micro-batch (FrameworkTraits::fsdp_pipeline_step_sync); with PP
  // torchtitan also keeps parameters gathered after forward (parallelize_llama.py apply_fsdp:
  // reshard_after_forward = not pp_enabled, a plan field here).
  torchtitan.fsdp_pipeline_step_sync = true;
  // pipeline_parallel_split_points give every stage of a looped schedule its own layer count
  // (pipelining_utils.py generate_split_points, the default, gives the first and last stage one
  // layer less when the layers do not divide).
  torchtitan.uneven_interleaved = true;
  // train.py's loss_fn, cross_entropy on pred.float(), runs under utils.get_train_context(
  // loss_parallel_enabled) with the output layer's logits left sharded on the vocabulary
  // (parallelize_llama.py apply_tp: ColwiseParallel, output_layouts Shard(-1)) whenever TP is on and
  // --training.disable_loss_parallel is not given (9dec370); the loss is not compiled there
  // ("compiling loss function causes CUDA errors"). With PP the stages are torch.distributed.
  // pipelining's, which keep each micro-batch's output for the schedule's merge.
  torchtitan.dtensor_loss_parallel = true;
  torchtitan.pp_keeps_stage_outputs = true;
  // training.enable_cpu_offload is FSDP2's CPUOffloadPolicy: the sharded fp32 parameters and
  // gradients live on the host and the optimizer steps there (parallelize_llama.py apply_fsdp
  // offload_policy), more than plan.offload.optimizer describes; no activation offload.
  torchtitan.optimizer_offload = torchtitan.activation_offload = false;
  torchtitan.optimizer_offload_refusal =
      "torchtitan's CPU offload (FSDP2's CPUOffloadPolicy) moves the sharded parameters and gradients to the host "
      "too, which plan.offload does not describe (deepspeed or megatron-core offload the optimizer alone)";
  torchtitan.activation_offload_refusal =
      "torchtitan keeps activations on the GPU (deepspeed, megatron-core or foresight-train offload them)";

  // IBM's fms-fsdp (foundation-model-stack/fms-fsdp main_training.py and fms_fsdp/utils/train_utils.py,
  // 2024): PyTorch FSDP1 (FullyShardedDataParallel with each LLaMABlock a unit, limit_all_gathers,
  // the default BACKWARD_PRE prefetch; FULL_SHARD or, sharding_strategy hsdp, HYBRID_SHARD over a
  // node) around the ibm-fms LLaMA, eager or compiled, SDPA flash attention, AdamW over the fp32
  // shards, and its "selective" checkpointing: full recompute of an evenly spaced share p of the
  // blocks (fms_fsdp/policies/ac_handler.py), the same time and memory as recompute_layers = p x
  // layers without pipeline stages. What differs from torchtitan's entry: FSDP1's flat parameters
  // (gathered straight into the buffer the layers' views read; no copies per unit), gradients
  // reduced in bf16 (bfSixteen), the block's RoPE and loss (kFmsEagerTraffic), the logits kept by
  // the training loop through the backward, and no tensor, pipeline or context parallelism (its
  // trainer has none) and no Float8.
  FrameworkTraits fms_fsdp = derived(
      torchtitan, Framework::fms_fsdp, "fms-fsdp", "IBM fms-fsdp with PyTorch FSDP1 and the ibm-fms LLaMA (2024)",
      "foundation-model-stack/fms-fsdp (main_training.py, fms_fsdp/utils/train_utils.py get_policies and train, "
      "fms_fsdp/policies/mixed_precision.py bfSixteen, ac_handler.py; README benchmarks, 2024-02 to 2024-05); "
      "foundation-model-stack/foundation-model-stack fms/models/llama.py and fms/modules (2024-02)");
  fms_fsdp.launcher = Launcher::fms_fsdp;
  fms_fsdp.elementwise = kFmsEagerTraffic;
  fms_fsdp.compiled_elementwise = kFmsCompiledTraffic;
  fms_fsdp.precision.reduce_bytes = 2;
  // nn.CrossEntropyLoss on the bf16 logits holds, at the backward's peak, nll_loss's dense bf16
  // gradient, log_softmax's saved bf16 output and the input gradient (2 + 2 + 2), and the loop's
  // `output` keeps the logits themselves alive through loss.backward() (torchtitan deletes its
  // `pred` first): 8. That is the loop of the benchmarked releases (train_utils.py at 5e522b4 and
  // 3b1ce15, 2024); fms-fsdp#152 (2025-07) deletes `output` before the backward, 6 from then on.
  fms_fsdp.activations.logits_bytes = 8;
  fms_fsdp.fsdp2_unit_copies = false;
  fms_fsdp.fsdp1_reduce_passes = true;
  fms_fsdp.partial_recompute = true;
  fms_fsdp.op_selective_recompute = false;
  fms_fsdp.tensor_parallel = fms_fsdp.pipeline_parallel = fms_fsdp.context_parallel = false;
  fms_fsdp.tp_overlap = fms_fsdp.tp_overlap_needs_compile = false;
  fms_fsdp.sequence_parallel = false;
  fms_fsdp.tp_needs_sequence_parallel = false;
  fms_fsdp.cp_torch_sdpa = false;
  fms_fsdp.fp8_tensorwise_tp_gather = fms_fsdp.fp8_param_gather = false;
  fms_fsdp.fsdp_pipeline_step_sync = false;
  // train_utils.py train(): one forward, one backward and one optimizer.step() per batch from the
  // loader (batch_size sequences per GPU), so no gradient accumulation; FSDP1's HYBRID_SHARD as
  // main_training.py constructs it (sharding_strategy only, no process groups or device mesh)
  // shards over each node's ranks.
  fms_fsdp.gradient_accumulation = false;
  // Its sharding_strategy is fsdp, hsdp or ddp (get_policies): FULL_SHARD, HYBRID_SHARD or NO_SHARD,
  // no SHARD_GRAD_OP, so parameters are always released after the forward. Its training is bf16
  // (or fp16 where the GPU has no bf16) without float8.
  fms_fsdp.zero3_keep_gathered = false;
  fms_fsdp.fp8_training = false;
  fms_fsdp.hybrid_sharding_per_node = true;
  fms_fsdp.optimizer_offload_refusal =
      "fms-fsdp runs no optimizer offload (FSDP1's CPUOffload would move the parameters and gradients too, "
      "which plan.offload does not describe)";
  fms_fsdp.activation_offload_refusal =
      "fms-fsdp keeps activations on the GPU (deepspeed, megatron-core or foresight-train offload them)";

  // Dao-AILab/flash-attention's training code (training/, 2022-23; Dao et al. 2022, arXiv:2205.14135,
  // and Dao 2023, arXiv:2307.08691 sec. 4.2, whose end-to-end GPT runs it made): PyTorch Lightning
  // on one node, DDP (gradient_as_bucket_view, 25 MiB buckets, no_sync on all but the last
  // micro-batch) under bf16 autocast over fp32 parameters, flash_attn's GPT with the fused kernels
  // above (kFlashAttnGptTraffic) and FlashAttention (v2 from flash-attn 2.0, the default here;
  // plan.attention flash1 for the 2022 v1 kernel, where the GPU file has its figure). Its ZeRO-1 is
  // torch.distributed.optim.ZeroRedundancyOptimizer (training/src/utils/ddp_zero1.py,
  // configs/optimizer/adamw-zero.yaml): DDP's all-reduce of every gradient, the rank's step over
  // its parameters, then each rank's updated parameters broadcast to the others. What it saves for
  // the backward: the fp32 residual stream (residual_in_fp32) and the 1-byte dropout mask at both
  // norm sites (GPT2Config's resid_pdrop 0.1; attention dropout runs inside the kernel, no mask),
  // each norm's bf16 output, the packed qkv, the attention output (no copy before the projection),
  // fc1's pre-activation and GeLU output (FusedMLP checkpoint_lvl 0), and the bf16 logits, over
  // which the loss's backward writes their gradient (2 bytes a logit).
  FrameworkTraits flash_attn = derived(
      pytorch, Framework::flash_attn, "flash-attn",
      "Dao-AILab/flash-attention training/ (PyTorch Lightning DDP, flash_attn GPT, 2022-23)",
      "Dao-AILab/flash-attention training/ (README.md, configs/experiment/pile, src/utils/ddp_zero1.py), "
      "flash_attn/models/gpt.py, flash_attn/ops/layer_norm.py, fused_dense.py, losses/cross_entropy.py; "
      "notes/research-flashattention-training.md");
  flash_attn.attention = AttentionImpl::flash2;
  flash_attn.elementwise = kFlashAttnGptTraffic;
  flash_attn.compiled_elementwise.reset();
  flash_attn.activations = {.dropout = true, .attention_output_copy = false, .logits_bytes = 2};
  flash_attn.zero_reduction = ZeroReduction::all_reduce;
  flash_attn.max_zero = flash_attn.max_zero_with_pipeline = 1;
  // Its configs train on one node without model parallelism (gpt.py takes a tensor-parallel
  // process group, which no training config passes).
  flash_attn.tensor_parallel = flash_attn.pipeline_parallel = false;
  flash_attn.sequence_parallel = false;
  flash_attn.context_parallel = flash_attn.cp_torch_sdpa = false;
  flash_attn.tp_overlap = flash_attn.tp_overlap_needs_compile = false;
  flash_attn.tp_batch_first_relayout = false;
  // Nothing is checkpointed by its training loop or its GPT's blocks: the only recompute it has is
  // inside FusedMLP (mlp_checkpoint_lvl 1 and 2: the GeLU, or fc1 and the GeLU), which the
  // plan's recompute modes do not describe, and its configs keep it at 0.
  flash_attn.selective_recompute = flash_attn.full_recompute = flash_attn.partial_recompute = false;
  flash_attn.optimizer_offload_refusal =
      "flash-attn's training code keeps the optimizer on the GPU (deepspeed or megatron-core offload it)";
  flash_attn.activation_offload_refusal =
      "flash-attn's training code keeps activations on the GPU (deepspeed, megatron-core or foresight-train "
      "offload them)";

  // An idealised implementation for plans no particular framework constrains: fused attention,
  // 16-bit weights with an fp32 master copy (ZeRO paper sec. 3.1), whole-tensor pipeline sends,
  // DDP buckets, and every schedule (TeraPipe slicing included).
  FrameworkTraits generic = entry(Framework::generic, "generic", "idealised (no particular framework)",
                                  "Rajbhandari et al. 2020 (ZeRO) sec. 3.1; Dao et al. 2022 (FlashAttention); "
                                  "PyTorch DDP docs");
  generic.attention = AttentionImpl::flash;
  generic.sums_tied_embedding_copies = true;
  // A fused softmax cross-entropy (llm.c's fused classifier, as kernels/cross_entropy.cu): the
  // 16-bit logits read once for the row's max and sum, read again and their gradient written.
  generic.elementwise.loss_forward = 2;
  generic.elementwise.loss_backward = 4;
  generic.elementwise.loss_launches_forward = 1;
  generic.elementwise.loss_launches_backward = 1;
  generic.dp_bucket_bytes = kDdpBucketBytes;
  generic.schedules[int(Schedule::terapipe)] = true;
  // Zero-bubble and DualPipe schedules: no framework entry here runs them (sail-sg's Megatron-LM
  // fork and DeepSeek's in-house HAI-LLM do); the idealised framework does.
  generic.schedules[int(Schedule::zb_h1)] = generic.schedules[int(Schedule::dualpipe)] = true;
  generic.deepep = true;
  generic.moe_te_fusions = true;
  generic.deepep_fp8_dispatch = true;
  generic.recompute_modules = true;
  generic.mtp = true;
  generic.activations.fp8_linear_inputs = true;
  generic.context_parallel = true;
  generic.fp8_blockwise = true;
  generic.cp_comms[int(CpComm::all_to_all)] = generic.cp_comms[int(CpComm::all_to_all_ring)] = true;
  generic.fp8_param_gather = true;
  generic.tp_overlap = true;
  generic.microbatch_recompute = true;
  generic.uneven_interleaved = true;
  generic.expert_folding = true;

  // The bundled trainer (trainer/README.md): every op a Backend call (as the closed loop runs it:
  // fp32 on the CPU backend; the bf16 recipe's element sizes are not described here yet),
  // Megatron-LM's unfused attention without dropout, every TP rank sending its whole
  // boundary tensor (its shard under sequence parallelism), gradients all-reduced in
  // --dp-bucket-kB buckets (25 MiB) launched during the last micro-batch's backward, ZeRO-1 as one
  // reduce-scatter after the backward, the shard's step and a parameter all-gather, every schedule.
  FrameworkTraits trainer = entry(Framework::foresight_train, "foresight-train", "this repository's trainer",
                                  "trainer/README.md; trainer/layer.cpp, trainer/trainer.cpp, trainer/grad_sync.cpp");
  trainer.precision = {.fp32_parameters = true, .residual_bytes = 4, .fp32_main_grads = false,
                       .grads_freed_between_steps = false, .autocast_weight_copies = true};
  trainer.activations = {.dropout = false, .attention_output_copy = false, .logits_bytes = 4};
  trainer.zero_reduction = ZeroReduction::reduce_scatter;
  trainer.sums_tied_embedding_copies = true;
  // Its loss is kernels/cross_entropy.cu's fused kernel (as generic's).
  trainer.elementwise.loss_forward = 2;
  trainer.elementwise.loss_backward = 4;
  trainer.elementwise.loss_launches_forward = 1;
  trainer.elementwise.loss_launches_backward = 1;
  trainer.dp_bucket_bytes = kDdpBucketBytes;
  trainer.dp_overlap_bucket_bytes = kDdpBucketBytes;
  trainer.schedules[int(Schedule::terapipe)] = true;
  trainer.max_zero = trainer.max_zero_with_pipeline = 1;
  // What trainer/trainer.cpp check_runnable refuses, so that the planner offers only plans it runs
  // (tests/trainer: every plan `foresight plan --framework foresight-train` writes runs).
  trainer.dp_overlap = trainer.dp_overlap_with_pipeline = false;
  trainer.dp_overlap_refusal =
      "foresight-train does not run gradient reduction overlapped with the backward yet (it reduces after the "
      "backward: set it false, which is also what the simulator then predicts)";
  trainer.optimizer_offload = false;
  trainer.optimizer_offload_refusal = "foresight-train does not run optimizer offload yet";
  trainer.hybrid_sharding = false;
  trainer.zero1_expert_parallel = false;
  trainer.gpt_blocks_only = true;
  trainer.in_development = true;
  return {megatron, megatron_core, deepspeed, terapipe, pytorch, torchtitan, generic, trainer, llm_foundry, fms_fsdp, flash_attn};
}

}  // namespace

const FrameworkTraits& framework_traits(Framework f) {
  static const std::array<FrameworkTraits, 11> table = make_table();
  for (const auto& t : table)
    if (t.id == f) return t;
  FORESIGHT_CHECK(false) << "no traits for framework " << int(f);
  return table[0];
}

namespace {

/// The frameworks whose traits satisfy `can`, in enum order.
template <class Pred>
std::vector<std::string> framework_names_that(Pred can) {
  std::vector<std::string> names;
  for (const auto& entry : EnumNames<Framework>::kList)
    if (const FrameworkTraits& t = framework_traits(entry.first); can(t)) names.push_back(t.name);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out.empty() ? "none" : out;
}

/// "megatron-core, pytorch or generic".
template <class Pred>
std::string frameworks_that(Pred can) {
  return joined(framework_names_that(can));
}

std::string count(long long v) { return std::to_string(v); }

/// "2" or "1 to 3": the ZeRO stages from `lo` to `hi`.
std::string zero_stages(int lo, int hi) { return hi > lo ? count(lo) + " to " + count(hi) : count(lo); }

/// "megatron-core does" / "megatron-core or torchtitan do": the frameworks that can, as a clause.
template <class Pred>
std::string those_that_do(Pred can) {
  const std::vector<std::string> names = framework_names_that(can);
  return joined(names) + (names.size() == 1 ? " does" : " do");
}

}  // namespace

bool FrameworkTraits::fuses_gradient_accumulation(const PlanSpec& p) const {
  return p.gradient_accumulation_fusion.value_or(gradient_accumulation_fusion);
}

bool FrameworkTraits::overlaps_pipeline_sends(const PlanSpec& p) const {
  return p.schedule == Schedule::interleaved && p.pp > 1 && p.p2p_overlap.value_or(p2p_overlap);
}

bool FrameworkTraits::prefetches_zero3(const PlanSpec& p) const {
  return zero3_prefetch_choice ? p.zero3_prefetch.value_or(zero3_prefetch) : zero3_prefetch;
}

int FrameworkTraits::whole_reduce_buckets(const PlanSpec& p, bool moe) const {
  // DeepSpeed v0.5.8 to v0.12: the engine turns contiguous_gradients (default true) and
  // overlap_comm off at stage 1 ("meaningless in stage 1", engine.py _configure_zero_optimizer,
  // PR #1246), but the optimizer turns contiguous gradients back on under cpu_offload ("CPU-Offload
  // requires contiguous gradients"), and from v0.8 the engine keeps them for a model with MoE layers
  // (whose stage-1 optimizer asserts them: _configure_moe_settings; v0.5-v0.6 could not run MoE at
  // stage 1 without offload at all). With them its backward allocates ipg_buffer, one tensor of
  // reduce_bucket_size elements in the 16-bit dtype, and a second "to avoid data access conflict"
  // when overlap_comm is on (which the pipeline engine turns off: reduce_gradients(
  // pipeline_parallel=True) allocates one). BF16_Optimizer (plan.bf16_optimizer) has no such buffer,
  // and without contiguous gradients buffered_reduce_fallback flattens at most the gradients there are.
  if (!zero_whole_reduce_buckets || p.bf16_optimizer) return 0;
  if (p.zero == 2) return p.dp_overlap && overlaps_dp_reduction(p.pp, p.zero) ? 2 : 1;
  if (p.zero == 1 && (p.offload.optimizer || moe)) return 1;
  return 0;
}

double FrameworkTraits::overlap_bucket_elements(const PlanSpec& p, double reduce_bytes) const {
  if (dp_overlap_bucket_elements > 0)
    return std::max(dp_overlap_bucket_elements, dp_overlap_bucket_elements_per_rank * p.dp * p.cp);
  if (dp_overlap_bucket_bytes > 0) return dp_overlap_bucket_bytes / reduce_bytes;
  return reduce_bucket_elements(p);
}

double FrameworkTraits::reduce_bucket_elements(const PlanSpec& p) const {
  if (p.reduce_bucket > 0) return double(p.reduce_bucket);
  return p.zero >= 3 && zero3_reduce_bucket_elements > 0 ? zero3_reduce_bucket_elements : dp_bucket_elements;
}

bool FrameworkTraits::streams_gradients_to_host(const PlanSpec& p) const {
  return offloaded_optimizer_streams_gradients && p.offload.optimizer && p.zero == 2;
}

OffloadedGradientBytes FrameworkTraits::offloaded_gradient_bytes(const PlanSpec& p, int stage, int microbatches,
                                                                 double grad_bytes) const {
  const double g = std::max(1, microbatches);
  if (offloaded_gradient_path == OffloadGradientPath::gradient_dtype) return {grad_bytes, 0.0, grad_bytes};
  // DeepSpeed @ 38327e07. Both paths finish a step by casting each gradient to fp32 on the device
  // (.float()) and copying it into the fp32 gradient of the host's optimizer partition: 4 bytes
  // over PCIe and 4 kept.
  if (p.zero <= 2) {
    // stage_1_and_2.py copy_grads_in_partition under cpu_offload: with more than one micro-batch a
    // step, async_accumulate_grad_in_cpu_via_gpu first passes each parameter through a 16-bit host
    // copy (accumulated_grads_in_cpu): written down on the step's first micro-batch (micro_step_id
    // 0), read back onto the device and added on each later one; then
    // async_inplace_copy_grad_to_fp32_buffer_from_gpu. Stage 2 reduces, and so copies, after every
    // micro-batch; stage 1 only at the step's last (engine.py allreduce_gradients), one read back.
    if (g == 1) return {4.0, 0.0, 4.0};
    // Under the pipeline engine only the last stage's backward goes through the optimizer's
    // backward(), which counts micro-batches (pipe/engine.py _exec_backward_pass); on the others
    // micro_step_id stays at its initial -1, so stage 1's copy goes down and is never read back.
    if (p.zero <= 1 && p.pp > 1 && stage < p.pp - 1) return {4.0 + grad_bytes, 0.0, 4.0 + grad_bytes};
    if (p.zero <= 1) return {4.0, grad_bytes, 4.0 + grad_bytes};
    return {4.0 + grad_bytes, grad_bytes * (g - 1), 4.0 + grad_bytes};
  }
  // stage3.py partition_grads with offload_optimizer: the gradient partitions live in a host buffer
  // (grad_partitions_flat_buffer, on the optimizer's device) that every micro-batch reaches over
  // PCIe: the first copies its partition down and brings it back to the device (grad_buffer.to),
  // each later one brings the sum up, adds on the device and copies it down again.
  return {4.0 + grad_bytes * g, grad_bytes * g, 4.0 + grad_bytes};
}

PipelineSend FrameworkTraits::backward_send(const PlanSpec& p) const {
  // DeepSpeed before v0.5.4: is_grad_partitioned = False, nothing to gather on arrival.
  return pipe_grads_partitioning && !p.partitioned_pipe_grads.value_or(true) ? PipelineSend::whole : send_backward;
}

std::optional<PlanViolation> FrameworkTraits::refusal(const PlanSpec& p) const {
  const std::string me = name;
  // Without a pipeline, GPipe and 1F1B are the same execution.
  const bool unpipelined = p.pp == 1 && (p.schedule == Schedule::gpipe || p.schedule == Schedule::one_f_one_b);
  const bool schedule_ok = schedules[int(p.schedule)] ||
                           (unpipelined && (schedules[int(Schedule::gpipe)] || schedules[int(Schedule::one_f_one_b)]));
  if (!schedule_ok) {
    const int k = int(p.schedule);
    return violation("plan.schedule", to_string(p.schedule),
              me + " does not run this schedule (" + those_that_do([k](const FrameworkTraits& t) { return t.schedules[k]; }) + ")");
  }
  if (p.pp > 1 && !pipeline_parallel)
    return violation("plan.pp", count(p.pp),
              me + " has no pipeline parallelism (" +
                  those_that_do([](const FrameworkTraits& t) { return t.pipeline_parallel; }) + ")");
  if (p.tp > 1 && !tensor_parallel)
    return violation("plan.tp", count(p.tp),
              me + " has no tensor parallelism (" +
                  those_that_do([](const FrameworkTraits& t) { return t.tensor_parallel; }) + ")");
  if (p.zero == 1 && !zero1)
    return violation("plan.zero", "1",
                     me + " does not shard the optimizer state alone (" +
                         (zero2_is_shard_grad_op ? std::string("zero 3 shards everything")
                                                 : std::string("zero 2 shards gradients too, zero 3 everything")) +
                         ")");
  if (p.zero == 2 && zero2_is_shard_grad_op)
    return violation("plan.zero", "2",
                     me + " runs ZeRO-2 as FSDP's SHARD_GRAD_OP, which gathers the sharded parameters for every "
                          "micro-batch and reduce-scatters its gradients: write it as zero 3 with "
                          "reshard_after_forward false");
  if (p.sequence_parallel && !sequence_parallel)
    return violation("plan.sequence_parallel", "true",
              me + " has no sequence parallelism (" +
                  those_that_do([](const FrameworkTraits& t) { return t.sequence_parallel; }) + ")");
  if (tp_needs_sequence_parallel && p.tp > 1 && !p.sequence_parallel)
    return violation("plan.sequence_parallel", "false", me + "'s tensor parallelism shards the norms over the sequence: set it true");
  if (p.recompute == Recompute::selective && !selective_recompute)
    return violation("plan.recompute", "selective",
              me + " has no selective (attention-core) recompute (" +
                  those_that_do([](const FrameworkTraits& t) { return t.selective_recompute; }) + ")");
  if (p.recompute == Recompute::full && !full_recompute)
    return violation("plan.recompute", "full",
              me + " has no full activation recompute (" +
                  those_that_do([](const FrameworkTraits& t) { return t.full_recompute; }) + ")");
  if (p.recompute == Recompute::selective_op && !op_selective_recompute)
    return violation("plan.recompute", "selective-op",
              me + " has no per-op selective checkpointing (" +
                  frameworks_that([](const FrameworkTraits& t) { return t.op_selective_recompute; }) +
                  " do; selective is Korthikanti's attention-core recompute)");
  if (p.recompute_layers > 0 && !partial_recompute)
    return violation("plan.recompute_layers", count(p.recompute_layers),
              me + " recomputes every layer or none (no block method; " +
                  frameworks_that([](const FrameworkTraits& t) { return t.partial_recompute; }) +
                  " recompute the first N layers of a stage)");
  if (p.partial_recompute_microbatches > 0 && !microbatch_recompute)
    return violation("plan.partial_recompute_microbatches", count(p.partial_recompute_microbatches),
              me + " does not vary recompute by micro-batch (" +
                  those_that_do([](const FrameworkTraits& t) { return t.microbatch_recompute; }) + ")");
  if (p.compile && !compiled_elementwise)
    return violation("plan.compile", "true",
              me + " has no torch.compile mode (" +
                  those_that_do([](const FrameworkTraits& t) { return t.compiled_elementwise; }) + ")");
  if (p.zero < min_zero)
    return violation("plan.zero", count(p.zero),
              me + " runs FSDP (zero " + count(min_zero) + ") with its bf16 recipe; its other paths are framework pytorch's");
  const int most = p.pp > 1 ? max_zero_with_pipeline : max_zero;
  if (p.zero > most) {
    const bool piped = p.pp > 1;
    return violation("plan.zero", count(p.zero),
              me + " runs ZeRO up to stage " + count(most) + (piped ? " with a pipeline (plan.pp > 1)" : "") + " (" +
                  frameworks_that([&](const FrameworkTraits& t) {
                    return (piped ? t.max_zero_with_pipeline : t.max_zero) >= p.zero;
                  }) +
                  " run stage " + count(p.zero) + (piped ? " with a pipeline" : "") + ")");
  }
  if (p.zero >= 2 && p.ep > 1 && !sharded_expert_parallel)
    return violation("plan.ep", count(p.ep),
              me + " shards parameters or gradients (zero " + count(p.zero) +
                  ") only without expert parallelism (ep 1, or zero 1: its distributed optimizer; " +
                  frameworks_that([](const FrameworkTraits& t) { return t.sharded_expert_parallel && t.max_zero >= 2; }) +
                  " run both)");
  if (!p.reshard_after_forward && !zero3_keep_gathered)
    return violation("plan.reshard_after_forward", "false",
              me + " releases every module's gathered parameters after its forward (no SHARD_GRAD_OP mode; " +
                  frameworks_that([](const FrameworkTraits& t) { return t.zero3_keep_gathered && t.max_zero >= 3; }) +
                  " keep them)");
  if (p.cp > 1 && !context_parallel)
    return violation("plan.cp", count(p.cp),
              "needs a framework that runs context parallelism (" + me + " does not: " +
                  those_that_do([](const FrameworkTraits& t) { return t.context_parallel; }) + ")");
  if (p.cp > 1 && p.tp > 1 && !cp_with_tensor_parallel)
    return violation("plan.tp", count(p.tp),
              me + " runs context parallelism with tp 1 only (" +
                  those_that_do([](const FrameworkTraits& t) { return t.context_parallel && t.cp_with_tensor_parallel; }) +
                  " combine them)");
  if (p.cp > 1 && !cp_comms[int(p.cp_comm)])
    return violation("plan.cp_comm", to_string(p.cp_comm),
              me + " does not exchange context-parallel keys and values this way (" +
                  those_that_do([&](const FrameworkTraits& t) { return t.context_parallel && t.cp_comms[int(p.cp_comm)]; }) +
                  ")");
  if (p.tp_overlap && !tp_overlap)
    return violation("plan.tp_overlap", "true",
              me + " does not overlap TP communication (" +
                  those_that_do([](const FrameworkTraits& t) { return t.tp_overlap; }) + ")");
  if (p.tp_overlap && tp_overlap_needs_compile && !p.compile)
    return violation("plan.tp_overlap", "true",
              me + "'s TP overlap is async TP, an Inductor pass: it needs plan.compile true");
  if (p.dp_overlap && !overlaps_dp_reduction(p.pp, p.zero)) {
    if (!overlaps_dp_reduction(p.pp, dp_overlap_min_zero))
      return violation("plan.dp_overlap", "true", dp_overlap_refusal);
    return violation("plan.dp_overlap", "true",
                     me + " reduces gradients during the backward only at ZeRO stage " +
                         zero_stages(dp_overlap_min_zero, dp_overlap_max_zero) +
                         (*dp_overlap_zero_refusal ? std::string(" (") + dp_overlap_zero_refusal + ")" : std::string()) +
                         "; set it false");
  }
  if (p.param_gather_overlap && !param_gather_overlap)
    return violation("plan.param_gather_overlap", "true",
              me + " gathers the updated parameters after the step (" +
                  those_that_do([](const FrameworkTraits& t) { return t.param_gather_overlap; }) +
                  " overlap the gather with the next forward)");
  if (p.fp8_param_gather && !fp8_param_gather)
    return violation("plan.fp8_param_gather", "true",
              me + " does not gather parameters in FP8 (" +
                  those_that_do([](const FrameworkTraits& t) { return t.fp8_param_gather; }) + ")");
  if (p.ep_overlap && !ep_overlap)
    return violation("plan.ep_overlap", "true",
              me + " does not overlap MoE all-to-alls with compute (" +
                  those_that_do([](const FrameworkTraits& t) { return t.ep_overlap; }) + ")");
  if ((p.moe_permute_fusion || p.moe_shared_expert_overlap) && !moe_te_fusions)
    return violation(p.moe_permute_fusion ? "plan.moe_permute_fusion" : "plan.moe_shared_expert_overlap", "true",
              me + " has no Transformer Engine MoE fusions (" +
                  those_that_do([](const FrameworkTraits& t) { return t.moe_te_fusions; }) + ")");
  if (p.defer_embedding_wgrad && !defers_embedding_wgrad)
    return violation("plan.defer_embedding_wgrad", "true",
              me + " does not defer the LM head's weight gradients (" +
                  those_that_do([](const FrameworkTraits& t) { return t.defers_embedding_wgrad; }) + ")");
  // Megatron-Core's TransformerConfig raises without the fused accumulation: the drain adds the
  // deferred GEMMs straight into main_grad (core_r0.8.0 model_parallel_config.py, utils.py
  // drain_embedding_wgrad_compute).
  if (p.defer_embedding_wgrad && defers_embedding_wgrad && !fuses_gradient_accumulation(p))
    return violation("plan.defer_embedding_wgrad", "true",
                     "needs gradient accumulation fusion (plan.gradient_accumulation_fusion): " + me +
                         " adds the deferred GEMMs into the fp32 main gradients");
  if (p.recompute_modules.any() && !recompute_modules)
    return violation("plan.recompute_modules", "(set)",
              me + " has no per-module recompute (" +
                  those_that_do([](const FrameworkTraits& t) { return t.recompute_modules; }) + ")");
  if (p.cross_entropy_fusion != CrossEntropyFusion::none && !cross_entropy_fusion)
    return violation("plan.cross_entropy_fusion", to_string(p.cross_entropy_fusion),
              "is Megatron-Core's fused vocabulary-parallel cross-entropy; " + me + " does not run it (" +
                  those_that_do([](const FrameworkTraits& t) { return t.cross_entropy_fusion; }) + ")");
  if (p.ep_dispatcher == EpDispatcher::deepep && !deepep)
    return violation("plan.ep_dispatcher", "deepep",
              me + " does not dispatch through DeepEP (" +
                  those_that_do([](const FrameworkTraits& t) { return t.deepep; }) + ")");
  if (!p.partition_method.empty() && !partition_method)
    return violation("plan.partition_method", p.partition_method,
              "is DeepSpeed's pipeline partitioning; " + me +
                  " does not split layers that way (use plan.framework = deepspeed, or plan.stage_layers)");
  if (!uneven_pipeline && (!p.stage_layers.empty() || p.first_stage_layers > 0 || p.last_stage_layers > 0))
    return violation(!p.stage_layers.empty()     ? "plan.stage_layers"
              : p.first_stage_layers > 0 ? "plan.first_stage_layers"
                                         : "plan.last_stage_layers",
              !p.stage_layers.empty() ? entries(p.stage_layers.size(), "entries")
                                      : count(std::max(p.first_stage_layers, p.last_stage_layers)),
              me + " splits layers evenly over stages (" +
                  frameworks_that([](const FrameworkTraits& t) { return t.uneven_pipeline; }) +
                  " take uneven splits; deepspeed through plan.partition_method)");
  if (!uneven_interleaved && !p.stage_layers.empty() && p.schedule == Schedule::interleaved)
    return violation("plan.stage_layers", entries(p.stage_layers.size(), "entries"),
              me + "'s interleaved schedule splits every model chunk evenly (" +
                  frameworks_that([](const FrameworkTraits& t) { return t.uneven_interleaved; }) +
                  " take a count per chunk)");
  if (p.expert_tp > 0 && p.etp() != p.tp && !expert_folding)
    return violation("plan.expert_tp", count(p.expert_tp),
              "must equal plan.tp unless the framework folds expert parallelism over tp x cp x dp (" + me +
                  " does not: " + those_that_do([](const FrameworkTraits& t) { return t.expert_folding; }) + ")");
  if (p.p2p_overlap.value_or(false) && !p2p_overlap)
    return violation("plan.p2p_overlap", "true",
              me + " sends between pipeline stages blocking (" +
                  frameworks_that([](const FrameworkTraits& t) { return t.p2p_overlap; }) + " overlap them)");
  if (p.p2p_overlap.value_or(false) && p.schedule != Schedule::interleaved)
    return violation("plan.p2p_overlap", "true",
              "needs plan.schedule interleaved (it is " + std::string(to_string(p.schedule)) +
                  "): Megatron-Core overlaps pipeline sends only between model chunks and turns the flag off otherwise "
                  "(megatron/training/arguments.py)");
  if (p.bf16_optimizer && !bf16_optimizer)
    return violation("plan.bf16_optimizer", "true",
                     "is DeepSpeed's BF16_Optimizer; " + me + " does not run it (" +
                         frameworks_that([](const FrameworkTraits& t) { return t.bf16_optimizer; }) + ")");
  if (p.bf16_optimizer && p.zero != 1)
    return violation("plan.bf16_optimizer", "true",
                     "shards the fp32 optimizer state over data parallelism as ZeRO-1 does (DeepSpeed runs it with "
                     "ZeRO stage 0 in its config): it needs plan.zero 1 (it is " + std::to_string(p.zero) + ")");
  if (p.bf16_optimizer && p.offload.optimizer)
    return violation("plan.offload.optimizer", "true",
                     "DeepSpeed's BF16_Optimizer keeps its state on the GPU (the host optimizer is ZeRO-Offload's, "
                     "plan.bf16_optimizer false)");
  if (p.partitioned_pipe_grads && !pipe_grads_partitioning)
    return violation("plan.partitioned_pipe_grads", *p.partitioned_pipe_grads ? "true" : "false",
                     "chooses between DeepSpeed pipeline engines before and after v0.5.4; " + me +
                         " sends its pipeline gradients one way (" +
                         frameworks_that([](const FrameworkTraits& t) { return t.pipe_grads_partitioning; }) + " has both)");
  if (p.partitioned_pipe_grads && p.pp == 1)
    return violation("plan.partitioned_pipe_grads", *p.partitioned_pipe_grads ? "true" : "false",
                     "needs plan.pp > 1 (it is 1): without pipeline stages no gradient is sent between them");
  if (p.zero3_prefetch && !zero3_prefetch_choice)
    return violation("plan.zero3_prefetch", *p.zero3_prefetch ? "true" : "false",
                     "chooses between DeepSpeed ZeRO-3 releases with and without a complete prefetch trace; " + me +
                         (max_zero >= 3 ? " runs ZeRO-3 one way (" : " has no ZeRO-3 (") +
                         frameworks_that([](const FrameworkTraits& t) { return t.zero3_prefetch_choice; }) +
                         " has both)");
  if (p.zero3_prefetch && p.zero < 3)
    return violation("plan.zero3_prefetch", *p.zero3_prefetch ? "true" : "false",
                     "needs plan.zero 3 (it is " + std::to_string(p.zero) +
                         "): only stage 3 gathers parameters to prefetch");
  if (p.fused_softmax && !fused_softmax)
    return violation("plan.fused_softmax", *p.fused_softmax ? "true" : "false",
                     "is Megatron's fused scale-mask-softmax on unfused attention; " + me + " does not run it (" +
                         frameworks_that([](const FrameworkTraits& t) { return t.fused_softmax; }) + ")");
  if (p.fused_softmax && p.attention.value_or(attention) != AttentionImpl::unfused)
    return violation("plan.fused_softmax", *p.fused_softmax ? "true" : "false",
                     "applies to unfused attention only (plan.attention is " +
                         std::string(to_string(p.attention.value_or(attention))) +
                         "): a fused attention kernel computes the softmax inside itself");
  if (p.gradient_accumulation_fusion.value_or(false) && !precision.fp32_main_grads)
    return violation("plan.gradient_accumulation_fusion", "true",
              me + " keeps no fp32 main-gradient buffer for the weight-gradient GEMMs to add into (Megatron-LM's "
                   "fusion: " + frameworks_that([](const FrameworkTraits& t) { return t.precision.fp32_main_grads; }) + ")");
  if (p.shard_group > 0 && p.shard_group != p.grad_ranks() && !hybrid_sharding)
    return violation("plan.shard_group", count(p.shard_group),
              me + " shards over the whole data-parallel group (" +
                  frameworks_that([](const FrameworkTraits& t) { return t.hybrid_sharding; }) +
                  " shard within groups and replicate across them)");
  if (p.zero == 1 && p.ep > 1 && !zero1_expert_parallel)
    return violation("plan.zero", "1", me + " does not run ZeRO-1 with expert parallelism (plan.ep > 1)" + not_yet());
  if (p.offload.optimizer) {
    if (!optimizer_offload)
      return violation("plan.offload.optimizer", "true",
                       *optimizer_offload_refusal ? std::string(optimizer_offload_refusal)
                                                  : me + " does not offload the optimizer");
    if (p.zero < optimizer_offload_min_zero || p.zero > optimizer_offload_max_zero)
      return violation("plan.offload.optimizer", "true",
                       me + " offloads the optimizer as a mode of its sharded optimizer: plan.zero " +
                           zero_stages(optimizer_offload_min_zero, optimizer_offload_max_zero) + " (it is " +
                           count(p.zero) + ")");
  }
  if (p.offload.activations > 0) {
    const std::string value = value_text(p.offload.activations);
    if (!activation_offload)
      return violation("plan.offload.activations", value,
                       *activation_offload_refusal ? std::string(activation_offload_refusal)
                                                   : me + " does not offload activations");
    if (activation_offload_needs_full_recompute && p.recompute != Recompute::full)
      return violation("plan.offload.activations", value,
                       me + " offloads the checkpoints of recomputed layers (cpu_checkpointing): it needs plan.recompute "
                            "full (it is " + std::string(to_string(p.recompute)) + ")");
    if (activation_offload_without_recompute &&
        (p.recompute != Recompute::none || p.recompute_layers > 0 || p.recompute_modules.any()))
      return violation("plan.offload.activations", value,
                       me + "'s CPU offloading does not work with activation recompute: plan.recompute none, no "
                            "recompute_layers or recompute_modules");
    if (!activation_offload_with_pipeline && p.pp > 1)
      return violation("plan.offload.activations", value,
                       me + " offloads activations only without a pipeline (plan.pp 1; it is " + count(p.pp) + ")");
    if (!activation_offload_every_layer && p.offload.activations >= 1.0)
      return violation("plan.offload.activations", value,
                       me + " offloads fewer layers than the model has (cpu_offloading_num_layers < num_layers): "
                            "it must be below 1");
  }
  if (p.reduce_bucket > 0 && dp_bucket_elements <= 0)
    return violation("plan.reduce_bucket", count(p.reduce_bucket),
              me + " does not reduce gradients in buckets of elements (deepspeed's reduce_bucket_size does)");
  return std::nullopt;
}

std::optional<PlanViolation> FrameworkTraits::model_refusal(const ModelSpec& m) const {
  if (m.mtp_layers > 0 && !mtp)
    return violation("model.mtp_layers", count(m.mtp_layers),
                     std::string(name) + " builds no multi-token prediction modules (" +
                         those_that_do([](const FrameworkTraits& t) { return t.mtp; }) + ")");
  if (!gpt_blocks_only) return std::nullopt;
  const std::string me = name;
  auto lacks = [&](std::string field, std::string value, const std::string& what) {
    return violation(std::move(field), std::move(value), me + " does not run " + what + not_yet());
  };
  if (m.activation != Activation::gelu)
    return lacks("model.activation", to_string(m.activation), "activations other than gelu (gated MLPs)");
  if (m.attention_head_dim > 0 && m.attention_head_dim * m.heads != m.hidden)
    return lacks("model.head_dim", count(m.attention_head_dim), "heads x head_dim != hidden");
  if (!m.tie_embeddings) return lacks("model.tie_embeddings", "false", "an untied LM head");
  if (m.mla) return lacks("model.mla", "(set)", "multi-head latent attention");
  if (m.position != PositionEmbedding::learned)
    return lacks("model.position_embedding", to_string(m.position), "position encodings other than learned");
  if (m.norm != Norm::layernorm) return lacks("model.norm", to_string(m.norm), "norms other than layernorm");
  if (!m.bias) return lacks("model.bias", "false", "linear layers without biases");
  if (m.kv_heads != m.heads) return lacks("model.kv_heads", count(m.kv_heads), "grouped-query attention");
  if (m.attention_window) return lacks("model.attention_window", count(m.attention_window->size), "sliding-window attention");
  if (m.attention_sinks) return lacks("model.attention_sinks", "true", "attention sinks");
  if (m.parallel_block) return lacks("model.parallel_block", "true", "the parallel attention + MLP block");
  if (m.dropout.value_or(false)) return lacks("model.dropout", "true", "dropout");
  if (m.moe) {
    if (m.moe->dropless) return lacks("model.moe.dropless", "true", "dropless MoE routing (it runs a capacity)");
    if (m.moe->shared_experts > 0)
      return lacks("model.moe.shared_experts", count(m.moe->shared_experts), "shared experts");
    if (m.moe->expert_ffn_hidden > 0 && m.moe->expert_ffn_hidden != m.ffn_hidden)
      return lacks("model.moe.expert_ffn_hidden", count(m.moe->expert_ffn_hidden),
                   "experts narrower or wider than the dense FFN");
    if (m.moe->first_dense > 0)
      return lacks("model.moe.first_dense", count(m.moe->first_dense), "leading dense layers in an MoE model");
  }
  return std::nullopt;
}

std::optional<PlanViolation> FrameworkTraits::model_plan_refusal(const ModelSpec& m, const PlanSpec& p) const {
  if (!m.moe) return std::nullopt;
  const std::string me = name;
  if (p.pp > 1 && !moe_with_pipeline)
    return violation("plan.pp", count(p.pp),
                     me + " builds MoE layers only without a pipeline (plan.pp 1; " +
                         frameworks_that([](const FrameworkTraits& t) { return t.moe_with_pipeline && t.pipeline_parallel; }) +
                         " pipeline MoE models)");
  if (p.zero >= 3 && !moe_zero3)
    return violation("plan.zero", count(p.zero),
                     me + " refuses ZeRO-3 on a model with MoE layers (\"MoE not supported with Stage 3\"; zero 0 to 2)");
  return std::nullopt;
}

std::string FrameworkTraits::describe() const { return std::string(name) + " (" + version + ")"; }

}  // namespace foresight
