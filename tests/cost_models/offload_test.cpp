// Offload traffic, time and host memory against hand computations (ZeRO-Offload's per-iteration
// volume: gradients down, weights up; Ren et al. 2021 sec. 4).
#include "cost_models/offload.hpp"

#include <gtest/gtest.h>

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

ClusterSpec node(Bytes host_memory) {
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 8;
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
  // ZeRO-1 over dp 4: this GPU updates 77,443,072 / 4 = 19,360,768 parameters.
  // Down: bf16 gradients, 2 B each = 38,721,536 B; up: bf16 weights, the same.
  // Time at 25 GB/s: 38,721,536 / 25e9 = 1.54886144 ms each way, concurrently.
  // Host: 12 B (fp32 master, m, v) + 2 B received gradient = 14 B x 19,360,768 = 271,050,752 B
  // per GPU; 8 GPUs a node: 2,168,406,016 B.
  const OffloadCost c = offload_cost(exec(kTraining, zero1_dp4(Framework::deepspeed)), tiny(), kTraining, zero1_dp4(Framework::deepspeed), node(2000_GB), 0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_host.value(), 38721536.0);
  EXPECT_DOUBLE_EQ(c.optimizer_to_device.value(), 38721536.0);
  EXPECT_DOUBLE_EQ(c.activations_to_host.value(), 0.0);
  EXPECT_NEAR(in_ms(c.to_host_time), 1.54886144, 1e-12);
  EXPECT_NEAR(in_ms(c.time()), 1.54886144, 1e-12);
  EXPECT_DOUBLE_EQ(c.host_memory_per_gpu.value(), 271050752.0);
  EXPECT_DOUBLE_EQ(c.host_memory_per_node.value(), 2168406016.0);
  EXPECT_TRUE(host_memory_fits(c, node(2000_GB).host));
  // With 1 GB of host memory the node is 1,168,406,016 B short.
  EXPECT_FALSE(host_memory_fits(c, node(1_GB).host));
  EXPECT_DOUBLE_EQ(host_memory_shortfall(c, node(1_GB).host).value(), 1168406016.0);
  // DeepSpeedCPUAdam streams 28 B per parameter (read gradient, weight, m, v; write weight, m, v),
  // every GPU of the node at once on 260 GB/s: 32.5 GB/s each. 19,360,768 x 28 = 542,101,504 B in
  // 16.680046276923... ms.
  EXPECT_NEAR(in_ms(c.host_optimizer_time), 542101504.0 / 32.5e9 * 1e3, 1e-9);
}

TEST(OffloadCost, TheHostStepsTorchsAdamWPassByPass) {
  // PyTorch's AdamW on CPU tensors (single-tensor path): 80 B per parameter, 19,360,768 x 80 =
  // 1,548,861,440 B at 32.5 GB/s = 47.657275076923... ms; twice the GPUs per node, half the share.
  const PlanSpec p = zero1_dp4(Framework::megatron);
  EXPECT_NEAR(in_ms(offload_cost(exec(p), tiny(), kTraining, p, node(2000_GB), 0).host_optimizer_time),
              1548861440.0 / 32.5e9 * 1e3, 1e-9);
  ClusterSpec sixteen = node(2000_GB);
  sixteen.gpus_per_node = 16;
  EXPECT_NEAR(in_ms(offload_cost(exec(p), tiny(), kTraining, p, sixteen, 0).host_optimizer_time),
              1548861440.0 / 16.25e9 * 1e3, 1e-9);
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
  EXPECT_DOUBLE_EQ(c.host_memory_per_node.value(), 8 * 119537664.0);
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
