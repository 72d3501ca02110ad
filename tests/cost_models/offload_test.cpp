// Offload traffic, time and host memory against hand computations (ZeRO-Offload's per-iteration
// volume: gradients down, weights up; Ren et al. 2021 sec. 4).
#include "cost_models/offload.hpp"

#include <gtest/gtest.h>

#include "core/scenario.hpp"
#include "cost_models/memory.hpp"

namespace foresight::cost_models {
namespace {

using namespace foresight::literals;

// 2 layers, h 1024, 16 heads, s 1024, vocab 50000. Parameters on one GPU with tp = pp = 1:
// 2 (12h^2 + 13h) = 25,192,448; word embeddings 51,200,000; positions 1,048,576; final norm 2,048.
// Total 77,443,072.
ModelSpec tiny() {
  return ModelSpec{.name = "tiny", .layers = 2, .hidden = 1024, .heads = 16, .seq_len = 1024, .vocab = 50000,
                   .ffn_hidden = 4096, .kv_heads = 16, .moe = std::nullopt};
}

// A node of 4 GPUs, which the dp-4 plans below fill.
ClusterSpec node(Bytes host_memory) {
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 4;
  c.gpu.hbm = 80_GiB;
  c.host = HostSpec{.pcie_bandwidth = 25_GBps, .memory = host_memory, .memory_bandwidth = 260_GBps};
  return c;
}

const TrainingSpec kTraining{.global_batch = 32, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};

ExecutionModel exec(const TrainingSpec& t, const PlanSpec& p) { return execution_model(t, p); }
ExecutionModel exec(const PlanSpec& p) { return execution_model(kTraining, p); }

PlanSpec zero1_dp4(Framework fw) {
  PlanSpec p;
  p.dp = 4;
  p.zero = 1;
  p.framework = fw;
  p.offload.optimizer = true;
  return p;
}

TEST(OffloadCost, ParametersOfTheTinyModel) {
  EXPECT_DOUBLE_EQ(parameters_on_gpu(framework_traits(Framework::megatron), tiny(), PlanSpec{}, 0).total(), 77443072.0);
}

TEST(OffloadCost, OptimizerZeroOffloadDeepSpeed) {
  // ZeRO-1 over dp 4: this GPU updates 77,443,072 / 4 = 19,360,768 parameters, in 32 / 4 = 8
  // micro-batches a step. DeepSpeed (stage_1_and_2.py under cpu_offload) casts each gradient to
  // fp32 on the device and copies it down: 4 B each = 77,443,072 B. With more than one micro-batch
  // a step it first passes every parameter through a 16-bit host copy, which stage 1 (reducing once,
  // at the step's last micro-batch) reads back onto the device once: 2 B, plus the bf16 weights'
  // 2 B = 77,443,072 B up. Time at 25 GB/s: 77,443,072 / 25e9 = 3.09772288 ms each way.
  // Host: 12 B (fp32 master, m, v) + 4 B fp32 gradient + 2 B 16-bit copy = 18 B x 19,360,768 =
  // 348,493,824 B per GPU; 4 GPUs a node: 1,393,975,296 B.
  const OffloadCost c = offload_cost(exec(kTraining, zero1_dp4(Framework::deepspeed)), tiny(), kTraining, zero1_dp4(Framework::deepspeed), node(2000_GB), 0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_host.value(), 77443072.0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_device.value(), 77443072.0);
  EXPECT_DOUBLE_EQ(c.activations_to_host.value(), 0.0);
  EXPECT_NEAR(in_ms(c.to_host_time), 3.09772288, 1e-12);
  EXPECT_NEAR(in_ms(c.time()), 3.09772288, 1e-12);
  EXPECT_DOUBLE_EQ(c.host_memory_per_gpu.value(), 348493824.0);
  EXPECT_DOUBLE_EQ(c.host_memory_per_node.value(), 1393975296.0);
  EXPECT_TRUE(host_memory_fits(c, node(2000_GB).host));
  // With 1 GB of host memory the node is 393,975,296 B short.
  EXPECT_FALSE(host_memory_fits(c, node(1_GB).host));
  EXPECT_DOUBLE_EQ(host_memory_shortfall(c, node(1_GB).host).value(), 393975296.0);
  // DeepSpeedCPUAdam streams 28 B per parameter (read gradient, weight, m, v; write weight, m, v),
  // every GPU of the node at once on 260 GB/s: 65 GB/s each. 19,360,768 x 28 = 542,101,504 B in
  // 8.340023138461... ms.
  EXPECT_NEAR(in_ms(c.host_optimizer_time), 542101504.0 / 65e9 * 1e3, 1e-9);
}

TEST(OffloadCost, DeepSpeedsGradientsCrossPcieAsItsStagesMoveThem) {
  // The same 19,360,768 parameters a GPU (dp 4), bf16 gradients (2 B), DeepSpeed @ 38327e07.
  const double owned = 19360768.0;
  PlanSpec p = zero1_dp4(Framework::deepspeed);
  const auto cost = [&](int zero, int global_batch) {
    p.zero = zero;
    const TrainingSpec t{.global_batch = global_batch, .dtype = Dtype::bf16, .optimizer = Optimizer::adam};
    return offload_cost(exec(t, p), tiny(), t, p, node(2000_GB), 0);
  };
  // One micro-batch a step (global batch 4): stages 1 and 2 copy the fp32 cast down once, 4 B, and
  // get the bf16 weights back, 2 B; the host keeps 12 + 4 B.
  for (int zero : {1, 2}) {
    const OffloadCost c = cost(zero, 4);
    EXPECT_DOUBLE_EQ(c.optimizer_to_host.value(), 4.0 * owned) << "ZeRO-" << zero;
    EXPECT_DOUBLE_EQ(c.optimizer_to_device.value(), 2.0 * owned) << "ZeRO-" << zero;
    EXPECT_DOUBLE_EQ(c.host_memory_per_gpu.value(), 16.0 * owned) << "ZeRO-" << zero;
  }
  // ZeRO-2, 8 micro-batches: it reduces after each, so the 16-bit host copy is written on the
  // first (2 B down) and read back on the other 7 (14 B up), then the fp32 cast goes down (4 B):
  // 6 B down, 14 + 2 (weights) = 16 B up; host 12 + 4 + 2 = 18 B.
  const OffloadCost two = cost(2, 32);
  EXPECT_DOUBLE_EQ(two.optimizer_to_host.value(), 6.0 * owned);
  EXPECT_DOUBLE_EQ(two.optimizer_to_device.value(), 16.0 * owned);
  EXPECT_DOUBLE_EQ(two.host_memory_per_gpu.value(), 18.0 * owned);
  // ZeRO-3 (stage3.py partition_grads): the gradient partitions live in a 16-bit host buffer
  // every micro-batch goes through (the first: down and back; each later one: up, add, down), and
  // the fp32 cast goes down at the step's end: 8 x 2 + 4 = 20 B down, 8 x 2 + 2 = 18 B up; the host
  // keeps 12 + 4 + 2 = 18 B.
  const OffloadCost three = cost(3, 32);
  EXPECT_DOUBLE_EQ(three.optimizer_to_host.value(), 20.0 * owned);
  EXPECT_DOUBLE_EQ(three.optimizer_to_device.value(), 18.0 * owned);
  EXPECT_DOUBLE_EQ(three.host_memory_per_gpu.value(), 18.0 * owned);
  // ZeRO-1 under the pipeline engine, 8 micro-batches: only the last stage's backward passes
  // through the optimizer and counts micro-batches, so there the 16-bit copy is read back (2 B up);
  // on the other stages it is written down at the step's end and never read (2 B more down).
  PlanSpec piped = zero1_dp4(Framework::deepspeed);
  piped.pp = 2;
  const FrameworkTraits& ds = framework_traits(Framework::deepspeed);
  const OffloadedGradientBytes first = ds.offloaded_gradient_bytes(piped, 0, 8, 2.0);
  const OffloadedGradientBytes last = ds.offloaded_gradient_bytes(piped, 1, 8, 2.0);
  EXPECT_DOUBLE_EQ(first.to_host, 6.0);
  EXPECT_DOUBLE_EQ(first.to_device, 0.0);
  EXPECT_DOUBLE_EQ(last.to_host, 4.0);
  EXPECT_DOUBLE_EQ(last.to_device, 2.0);
  EXPECT_DOUBLE_EQ(first.host_kept, 6.0);
  EXPECT_DOUBLE_EQ(last.host_kept, 6.0);
}

TEST(OffloadCost, TheHostStepsTorchsAdamWPassByPass) {
  // PyTorch's AdamW on CPU tensors (single-tensor path): 80 B per parameter, 19,360,768 x 80 =
  // 1,548,861,440 B at 65 GB/s (260 over the node's 4 GPUs) = 23.828637538461... ms.
  const PlanSpec p = zero1_dp4(Framework::megatron);
  EXPECT_NEAR(in_ms(offload_cost(exec(p), tiny(), kTraining, p, node(2000_GB), 0).host_optimizer_time),
              1548861440.0 / 65e9 * 1e3, 1e-9);
  // On a 16-GPU node the plan's 4 GPUs still share the host four ways: the other 12 run nothing
  // of this plan (another tenant's load is not modelled, as on the NICs).
  ClusterSpec sixteen = node(2000_GB);
  sixteen.gpus_per_node = 16;
  EXPECT_NEAR(in_ms(offload_cost(exec(p), tiny(), kTraining, p, sixteen, 0).host_optimizer_time),
              1548861440.0 / 65e9 * 1e3, 1e-9);
  EXPECT_EQ(gpus_sharing_host(sixteen, p), 4);
  // A plan that fills it, dp 16: each GPU steps 77,443,072 / 16 = 4,840,192 parameters on 260/16 =
  // 16.25 GB/s: 4,840,192 x 80 = 387,215,360 B in 23.828637538461... ms again, and the host holds
  // 16 GPUs' state.
  PlanSpec wide = p;
  wide.dp = 16;
  const OffloadCost c = offload_cost(exec(wide), tiny(), kTraining, wide, sixteen, 0);
  EXPECT_NEAR(in_ms(c.host_optimizer_time), 387215360.0 / 16.25e9 * 1e3, 1e-9);
  EXPECT_DOUBLE_EQ(c.host_memory_per_node.value(), 16 * c.host_memory_per_gpu.value());
}

TEST(OffloadCost, OptimizerZeroOffloadMegatronFp32Grads) {
  // Megatron bf16 keeps fp32 main grads: 4 B down (77,443,072 B), 2 B up (38,721,536 B); the link
  // is busy for the longer direction, 77,443,072 / 25e9 = 3.09772288 ms. Host 12 + 4 = 16 B/param.
  const OffloadCost c = offload_cost(exec(kTraining, zero1_dp4(Framework::megatron)), tiny(), kTraining, zero1_dp4(Framework::megatron), node(2000_GB), 0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_host.value(), 77443072.0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_device.value(), 38721536.0);
  EXPECT_NEAR(in_ms(c.time()), 3.09772288, 1e-12);
  EXPECT_DOUBLE_EQ(c.host_memory_per_gpu.value(), 16.0 * 19360768.0);
}

TEST(OffloadCost, TheGpusOfADgx2ShareItsHostLinks) {
  // ZeRO-Infinity (Rajbhandari et al. 2021, arXiv:2104.07857) Fig. 2b, CPU memory to GPU on a
  // DGX-2: 12.0 GB/s for one GPU alone, 3.0 GB/s per GPU when all 16 read at once (48 GB/s a
  // node): the bundled file's pcie_GBps 12 and pcie_node_GBps 48.
  const ClusterSpec dgx2 = load_cluster(resolve_scenario("clusters", "dgx2-v100"));
  PlanSpec p;
  for (const auto& [gpus, per_gpu] : {std::pair{1, 12.0}, {4, 12.0}, {8, 6.0}, {16, 3.0}, {64, 3.0}}) {
    p.dp = gpus;
    EXPECT_DOUBLE_EQ(in_GBps(host_link_bandwidth(dgx2, p)), per_gpu) << gpus << " GPUs";
  }
  // Without a node-wide figure every GPU keeps its own link, whatever the plan.
  EXPECT_DOUBLE_EQ(in_GBps(host_link_bandwidth(node(2000_GB), p)), 25.0);
  // ZeRO-Offload's round trip on all 16: a dp-16 ZeRO-1 plan of the tiny model sends 77,443,072 /
  // 16 = 4,840,192 gradients down as fp32 (19,360,768 B) at 3 GB/s: 6.453589333... ms.
  PlanSpec z = zero1_dp4(Framework::deepspeed);
  z.dp = 16;
  const OffloadCost c = offload_cost(exec(z), tiny(), kTraining, z, dgx2, 0);
  EXPECT_NEAR(in_ms(c.to_host_time), 19360768.0 / 3e9 * 1e3, 1e-9);
}

TEST(OffloadCost, DeepSpeedsCpuAdamOnADgx2AgainstZeroOffloadsTable4) {
  // ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840) Table 4: DeepSpeed's CPU-Adam on a DGX-2's
  // two Xeon Platinum 8168 (Table 2) steps 1 / 2 / 4 / 8 / 10 billion parameters in 0.22 / 0.51 /
  // 1.03 / 2.41 / 2.57 s. The bundled dgx2-v100 file's host rate, 109 GB/s, is the median of the
  // five rows' rates at 28 B a parameter; what is checked here is that one rate a byte carries
  // every row, with the whole host to the one GPU of the paper's single-GPU runs (it would be a
  // sixteenth with the node's other GPUs stepping too): 28 / 109e9 s a parameter is +16.8% on the
  // 1B row and -14.7% on the 8B row, the extremes.
  const ClusterSpec dgx2 = load_cluster(resolve_scenario("clusters", "dgx2-v100"));
  PlanSpec p;
  p.zero = 2;
  p.framework = Framework::deepspeed;
  p.offload.optimizer = true;
  const TrainingSpec t{.global_batch = 1, .dtype = Dtype::fp16, .optimizer = Optimizer::adam};
  const OffloadCost c = offload_cost(execution_model(t, p), tiny(), t, p, dgx2, 0);
  const double per_param = in_s(c.host_optimizer_time) / 77443072.0;
  EXPECT_NEAR(per_param, 28.0 / 109e9, 1e-20);
  for (const auto& [billions, seconds] : {std::pair{1.0, 0.22}, {2.0, 0.51}, {4.0, 1.03}, {8.0, 2.41}, {10.0, 2.57}})
    EXPECT_NEAR(per_param * billions * 1e9 / seconds, 1.0, 0.17) << billions << "B";
}

TEST(OffloadCost, NothingOffloadedCostsNothing) {
  const OffloadCost c = offload_cost(exec(kTraining, PlanSpec{}), tiny(), kTraining, PlanSpec{}, node(2000_GB), 0);
  EXPECT_EQ(c.to_host().value(), 0.0);
  EXPECT_EQ(c.to_device().value(), 0.0);
  EXPECT_EQ(c.time().value(), 0.0);
  EXPECT_EQ(c.host_memory_per_node.value(), 0.0);
}

TEST(OffloadCost, HalfTheActivations) {
  // 1F1B, pp 1, dp 4, micro-batch 1, global batch 32: m = 8 micro-batches, one in flight.
  // One micro-batch through both layers, no parallelism: 2 x sbh (34 + 5as/h) with
  // sbh = 1024*1024 = 1,048,576 and 5*16*1024/1024 = 80: 2 * 114 * 1,048,576 = 239,075,328 B.
  // Moved each way: 0.5 x 8 x 239,075,328 = 956,301,312 B; / 25e9 = 38.25205248 ms.
  // Host: half the peak stash (one micro-batch) = 119,537,664 B per GPU.
  PlanSpec p;
  p.dp = 4;
  p.offload.activations = 0.5;
  const OffloadCost c = offload_cost(exec(kTraining, p), tiny(), kTraining, p, node(2000_GB), 0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes_per_unit(exec(p), tiny(), p, 0).value(), 239075328.0);
  EXPECT_DOUBLE_EQ(c.activations_to_host.value(), 956301312.0);
  EXPECT_DOUBLE_EQ(c.activations_to_device.value(), 956301312.0);
  EXPECT_NEAR(in_ms(c.to_device_time), 38.25205248, 1e-9);
  EXPECT_DOUBLE_EQ(c.host_memory_per_gpu.value(), 119537664.0);
  EXPECT_DOUBLE_EQ(c.host_memory_per_node.value(), 4 * 119537664.0);
}

TEST(OffloadCost, ActivationOffloadShrinksTheDeviceStash) {
  // GPipe holds all 8 micro-batches (8 units). Offloading half keeps 4 units plus one half unit
  // staged for prefetch: the device saves 3.5 units = 3.5 x 239,075,328 = 836,763,648 B.
  PlanSpec p;
  p.dp = 4;
  p.schedule = Schedule::gpipe;
  const Bytes kept = stage_activation_bytes(exec(kTraining, p), tiny(), kTraining, p, 0);
  p.offload.activations = 0.5;
  const Bytes offloaded = stage_activation_bytes(exec(kTraining, p), tiny(), kTraining, p, 0);
  EXPECT_DOUBLE_EQ((kept - offloaded).value(), 836763648.0);
}

}  // namespace
}  // namespace foresight::cost_models
