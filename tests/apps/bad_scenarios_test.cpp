// Malformed scenario files: each must be refused through the user-error channel with the file,
// line, field, value and rule in the message, exit code 2, and nothing written to stdout.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli/cli.hpp"

namespace {

struct BadCase {
  const char* file;                   // tests/data/bad/<file>.yaml
  std::vector<std::string> expected;  // substrings the error message must contain
};

const std::vector<BadCase> kCases = {
    {"dtype_unsupported", {"training.dtype = bf16", "has no bf16 peak"}},
    {"pp_not_dividing_layers", {"plan.pp = 10", "must divide model.layers = 105", ":8:"}},
    {"tp_not_dividing_heads", {"plan.tp = 5", "must divide model.heads = 128"}},
    {"world_mismatch", {"tp*pp*dp = 8*35*9 = 2520", "must equal the GPUs used = 2240"}},
    {"batch_not_divisible", {"training.global_batch = 1921", "multiple of plan.dp * plan.micro_batch"}},
    {"negative_tp", {"plan.tp = -8", "must be at least 1"}},
    {"zero_micro_batch", {"plan.micro_batch = 0", "must be at least 1"}},
    {"string_for_int", {"plan.pp = thirty-five", "must be an integer"}},
    {"float_for_int", {"plan.dp = 8.5", "must be an integer"}},
    {"hex_for_int", {"plan.dp = 0x8", "must be an integer"}},
    {"unknown_plan_key", {"plan.pipeline_chunks", "is not a known key"}},
    {"unknown_top_key", {"experiment.gpu_count", "is not a known key"}},
    {"bad_schedule", {"plan.schedule = 2f2b", "gpipe | 1f1b | interleaved | terapipe"}},
    {"bad_recompute", {"plan.recompute = partial", "none | selective | full"}},
    {"optimizer_state_fp16", {"training.optimizer_state_dtype = fp16", "must be fp32 or bf16"}},
    {"optimizer_state_bf16_fp16_training", {"training.optimizer_state_dtype = bf16", "needs bf16 or fp8 training"}},
    {"zero_out_of_range", {"plan.zero = 4", "must be 0, 1, 2 or 3"}},
    {"zero_beyond_framework", {"plan.zero = 3", "megatron runs ZeRO up to stage 1 with a pipeline"}},
    {"missing_plan_field", {"plan.tp", "is required but missing"}},
    {"missing_training", {"training", "is required but missing"}},
    {"missing_model_file", {"experiment.model = ../good/no-such-model.yaml", "does not exist"}},
    {"too_many_nodes", {"experiment.nodes = 600", "must not exceed the cluster's 560 nodes"}},
    {"virtual_stages_without_interleaved", {"plan.virtual_stages = 3", "needs plan.schedule = interleaved"}},
    {"interleaved_layers", {"plan.virtual_stages = 2", "must divide model.layers = 105"}},
    {"interleaved_chunk_counts_megatron", {"plan.stage_layers = [70 entries]", "megatron splits layers evenly over stages"}},
    {"token_slices_without_terapipe", {"plan.token_slices", "needs plan.schedule = terapipe"}},
    // TeraPipe with context parallelism, slices left to the planner: refused as with explicit ones.
    {"terapipe_with_cp", {"plan.cp = 2", "cannot be combined with TeraPipe token slices"}},
    {"token_slices_bad_sum", {"plan.token_slices = sum 2024", "must sum to model.seq_len = 2048"}},
    {"offload_fraction_range", {"plan.offload.activations = 1.5", "must lie in [0, 1]"}},
    {"offload_optimizer_without_host_bandwidth",
     {"plan.offload.optimizer = true", "needs cluster.host.memory_GBps", ":14:"}},
    {"offload_optimizer_megatron_2021", {"plan.offload.optimizer = true", "Megatron-LM 2021-22 steps its optimizer on the GPU", ":14:"}},
    {"ep_without_moe", {"plan.ep = 2", "needs a model with moe"}},
    {"bool_type", {"plan.sequence_parallel = maybe", "must be true or false"}},
    {"fusion_not_bool", {"plan.gradient_accumulation_fusion = maybe", "must be true or false", ":14:"}},
    {"plan_is_list", {"plan", "must be a mapping"}},
    {"negative_measured", {"measured.iteration_s = -60.1", "must be greater than 0"}},
    {"invalid_yaml", {"is not valid YAML", "invalid_yaml.yaml:"}},
    {"cyclic_a", {"cyclic reference"}},
    {"moe_experts_not_divisible", {"plan.ep = 4", "must divide model.moe.experts = 6"}},
    {"hidden_not_divisible_by_heads", {"model.heads = 3", "must divide model.hidden = 100"}},
    {"bad_gpu_name", {"cluster.gpu = no-such-gpu", "does not exist"}},
    {"bad_fabric", {"cluster.intra_node.kind = infiniband", "nvswitch | nvlink-mesh | pcie"}},
    {"wrong_top_key_in_ref", {"exactly one top-level key 'model'"}},
    {"negative_bandwidth", {"cluster.intra_node.bandwidth_GBps = -300", "must be greater than 0"}},
    {"gpu_efficiency_above_one", {"gpu.kernels.gemm_efficiency.value = 1.057", "must be at most 1", ":15:"}},
    {"gpu_spread_too_wide", {"gpu.kernels.device_spread_cv.value = 0.3", "must be at most 0.25", ":18:"}},
    {"gpu_k_overhead_too_large", {"gpu.kernels.gemm_k_overhead.value = 10000", "must be at most 4096", ":18:"}},
    {"gpu_fp8_split_faster", {"gpu.kernels.fp8_split_accumulation_slowdown.value = 0.9", "must be at least 1", ":18:"}},
    {"gpu_persistent_half", {"gpu.kernels.persistent_gemm_grid.value = 0.5", "must be 0 or 1", ":18:"}},
    {"gpu_tile_candidates_two", {"gpu.kernels.gemm_tile_candidates.value = 2", "must be 1 (the default 256 x 128 tile) or 3", ":18:"}},
    {"window_pattern_value", {"model.attention_window.pattern = 2", "must be 1 (windowed) or 0 (full attention)", ":2:"}},
    {"bad_optimizer", {"training.optimizer = adafactor", "adam | sgd | lamb"}},
    // Switch tiers (cluster.inter_node.tiers): groups must nest, one form only, ratios >= 1.
    {"tiers_not_nesting", {"cluster.inter_node.tiers[1].nodes = 6", "multiple of the tier below's 4 nodes", ":9:"}},
    {"tiers_and_oversubscription", {"cluster.inter_node.tiers", "not both", ":9:"}},
    {"tiers_oversubscription_below_one", {"cluster.inter_node.tiers[0].oversubscription = 0.5", "at least 1"}},
    {"pcie_node_negative", {"cluster.host.pcie_node_GBps = -48", "at least 0", ":10:"}},
    // Found by fuzzing the bundled files (session 70): both reached the simulation before.
    {"nic_without_rate", {"cluster.inter_node.nic_Gbps = 0", "must be greater than 0 when", ":9:"}},
    {"gpu_capability_range", {"gpu.compute_capability = 80", "must be a CUDA compute capability", ":9:"}}
};

class BadScenario : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadScenario, RefusedWithLocatedMessageAndExitCode2) {
  const BadCase& c = GetParam();
  const std::string path = std::string(FORESIGHT_TEST_DATA) + "/bad/" + c.file + ".yaml";
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli({"describe", path}, out, err);
  EXPECT_EQ(rc, 2) << err.str();
  EXPECT_TRUE(out.str().empty()) << "stdout must stay empty on error, got: " << out.str();
  const std::string msg = err.str();
  EXPECT_NE(msg.find(c.file), std::string::npos) << "message must name the file: " << msg;
  for (const auto& e : c.expected) EXPECT_NE(msg.find(e), std::string::npos) << "missing '" << e << "' in: " << msg;
  // A location with a line number: "<file>.yaml:<line>" (cyclic and missing-file errors point at the referring line).
  EXPECT_NE(msg.find(".yaml:"), std::string::npos) << "message must carry file:line: " << msg;
}

INSTANTIATE_TEST_SUITE_P(Malformed, BadScenario, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.file); });

TEST(BadScenario, AtLeastTwentyCases) { EXPECT_GE(kCases.size(), 20u); }

TEST(GoodScenario, FixtureLoadsAndDescribes) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli({"describe", std::string(FORESIGHT_TEST_DATA) + "/good/experiment.yaml"}, out, err);
  EXPECT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("GPUs used"), std::string::npos);
}

TEST(GoodScenario, IntegersMayBeWrittenAsWholeFloats) {
  // DeepSpeed-style 9e7 and 1.92e3 are whole numbers: the fixture with them describes the same plan.
  std::ifstream f(std::string(FORESIGHT_TEST_DATA) + "/good/experiment.yaml");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto replace = [&text](const std::string& from, const std::string& to) {
    const std::size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("global_batch: 1920", "global_batch: 1.92e3");
  replace("dp: 8", "dp: 8.0");
  // The model and cluster files are named relative to the experiment: name the fixture's.
  replace("model: model.yaml", "model: " + std::string(FORESIGHT_TEST_DATA) + "/good/model.yaml");
  replace("cluster: cluster.yaml", "cluster: " + std::string(FORESIGHT_TEST_DATA) + "/good/cluster.yaml");
  const std::string path = ::testing::TempDir() + "/foresight_whole_floats_experiment.yaml";
  {
    std::ofstream o(path);
    o << text;
  }
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"describe", path}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("1920"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("dp 8"), std::string::npos) << out.str();
}

TEST(CommandLine, UnknownOptionIsExit2) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"describe", "--no-such-flag", "x"}, out, err), 2);
}

TEST(CommandLine, UnknownScenarioNameIsExit2) {
  std::ostringstream out, err;
  EXPECT_EQ(foresight::cli::run_cli({"describe", "no-such-experiment-name"}, out, err), 2);
  EXPECT_NE(err.str().find("no-such-experiment-name"), std::string::npos);
}

}  // namespace
