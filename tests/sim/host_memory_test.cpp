// Peak memory of the bundled trainer's ranks on a CPU device (sim/host_memory.cpp) against how the
// trainer holds pipeline messages: one exchange per run of sends and receives, completed before the
// next computation (trainer/trainer.cpp), so a stage never holds more sent outputs than one
// exchange's worth, however many micro-batches the step has.
#include <gtest/gtest.h>

#include "core/experiment.hpp"
#include "cost_models/execution.hpp"
#include "sim/host_memory.hpp"

namespace foresight::sim {
namespace {

// A 4-layer GPT of hidden 16, 2 heads, sequence 8, vocabulary 32, on a pipeline of 2 stages.
Experiment pipeline(Schedule schedule, int micro_batches, int virtual_stages) {
  Experiment e;
  e.model = ModelSpec{.name = "t", .layers = 4, .hidden = 16, .heads = 2, .seq_len = 8, .vocab = 32, .ffn_hidden = 64,
                      .kv_heads = 2, .moe = std::nullopt};
  e.training = TrainingSpec{.global_batch = micro_batches, .dtype = Dtype::fp32, .optimizer = Optimizer::adam};
  e.plan = PlanSpec{};
  e.plan.pp = 2;
  e.plan.schedule = schedule;
  e.plan.virtual_stages = virtual_stages;
  e.plan.framework = Framework::foresight_train;
  return e;
}

double activations(const Experiment& e, int stage) {
  const cost_models::ExecutionModel x = cost_models::execution_model(e.training, e.plan);
  return host_memory_per_stage(e, x).at(std::size_t(stage)).activations.value();
}

// 1F1B: the first stage has at most pp micro-batches in flight, and its sent outputs leave at the
// next exchange, so its peak does not grow with the step's micro-batches.
TEST(HostMemory, OneFOneBPeakIsBoundedByThePipelineDepth) {
  for (int stage : {0, 1}) {
    const double two = activations(pipeline(Schedule::one_f_one_b, 2, 1), stage);
    EXPECT_GT(two, 0.0);
    EXPECT_DOUBLE_EQ(activations(pipeline(Schedule::one_f_one_b, 4, 1), stage), two) << "stage " << stage;
    EXPECT_DOUBLE_EQ(activations(pipeline(Schedule::one_f_one_b, 16, 1), stage), two) << "stage " << stage;
  }
}

// Interleaved (2 chunks): the warm-up is bounded too (2(p - s - 1) + (v - 1)p forwards), and the
// steady state's batched pairs send both outputs at once.
TEST(HostMemory, InterleavedPeakIsBoundedByTheWarmUp) {
  for (int stage : {0, 1}) {
    const double four = activations(pipeline(Schedule::interleaved, 4, 2), stage);
    EXPECT_DOUBLE_EQ(activations(pipeline(Schedule::interleaved, 8, 2), stage), four) << "stage " << stage;
    EXPECT_DOUBLE_EQ(activations(pipeline(Schedule::interleaved, 16, 2), stage), four) << "stage " << stage;
  }
}

}  // namespace
}  // namespace foresight::sim
