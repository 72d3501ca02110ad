// foresight plan from the command line: an impossible request is a clear user error (exit 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli/cli.hpp"
#include "tests/apps/cli_run.hpp"

TEST(PlanCli, ImpossibleRequestSaysWhatRunsOutAndByHowMuch) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "sc21-table1-1t", "--gpus", "8", "--global-batch", "8", "--no-simgrid"}, out, err);
  EXPECT_EQ(rc, 2) << out.str();
  EXPECT_NE(err.str().find("no plan fits"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("GiB more than"), std::string::npos) << err.str();
  EXPECT_TRUE(out.str().empty());
}

// Every row's numbers end in the same column as their headers, whatever the length of the plan's
// description (MT-NLG's top 10 includes "tp4 pp7 dp80 mb1 1f1b rc:full zero1 off:opt off:act",
// 51 characters, longer than the 48 the table once reserved).
TEST(PlanCli, RankedTableColumnsStayAlignedForLongPlanDescriptions) {
  std::ostringstream out, err;
  const int rc = foresight::cli::run_cli(
      {"plan", "--experiment", "mt-nlg-530b-selene-280", "--top", "10", "--no-simgrid", "--memory-headroom", "0"}, out,
      err);  // without headroom long descriptions (offloaded plans, DeepSpeed partitions) rank in the top 10
  ASSERT_EQ(rc, 0) << err.str();
  std::istringstream lines(out.str());
  std::string line, header;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("rank  plan", 0) == 0) header = line;
    else if (!header.empty() && line.size() > 5 && line[3] >= '0' && line[3] <= '9' && line[4] == ' ') rows.push_back(line);
  }
  ASSERT_FALSE(header.empty()) << out.str();
  ASSERT_EQ(rows.size(), 10u) << out.str();
  const std::size_t iteration_end = header.find("iteration s") + std::string("iteration s").size();
  bool saw_long = false;
  for (const std::string& r : rows) {
    saw_long = saw_long || r.find("off:opt off:act") != std::string::npos ||
               r.find("partition:type:transformer") != std::string::npos;
    // The header and every row end at the same column (memory GB is right-aligned), and the
    // iteration time's last digit sits under the header's last letter.
    EXPECT_EQ(r.size(), header.size()) << r;
    ASSERT_GE(r.size(), iteration_end);
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(r[iteration_end - 1]))) << r;
    EXPECT_EQ(r[iteration_end], ' ') << r;
  }
  EXPECT_TRUE(saw_long) << "the test needs a long plan description in the top 10:\n" << out.str();
}

namespace {
using cli_run::Outcome;
Outcome plan(std::vector<std::string> args) { return cli_run::run("plan", std::move(args)); }
}  // namespace

TEST(PlanCli, MemoryHeadroomLeavesItsShareOfTheDeviceFree) {
  // SC21's 1.7B on 32 A100 80GB (85.9 GB): with a 50% headroom no ranked plan may use more than
  // 42.9 GB, and fewer plans fit than with none.
  const std::vector<std::string> base = {"--experiment", "sc21-table1-1.7b", "--no-simgrid", "--json", "--top", "1000"};
  auto with = [&](const char* headroom) {
    auto a = base;
    a.push_back("--memory-headroom");
    a.push_back(headroom);
    const Outcome o = plan(a);
    EXPECT_EQ(o.rc, 0) << o.err;
    return nlohmann::json::parse(o.out);
  };
  const auto none = with("0"), half = with("0.5");
  EXPECT_NEAR(half["memory_limit_GB"].get<double>(), 85.899345920 / 2, 1e-6);
  EXPECT_LT(half["evaluated"].get<long>(), none["evaluated"].get<long>());
  for (const auto& row : half["ranked"]) {
    EXPECT_LE(row["memory_GB"].get<double>(), 85.899345920 / 2 + 1e-9);
    EXPECT_NEAR(row["spare_GB"].get<double>(), 85.899345920 / 2 - row["memory_GB"].get<double>(), 1e-9);
  }
  EXPECT_EQ(plan({"--experiment", "sc21-table1-1.7b", "--memory-headroom", "0.95"}).rc, 2);  // out of [0, 0.9]
}

TEST(PlanCli, TheRecipesFusedLossCarriesOverToMegatronCorePlansOnly) {
  // NeMo 2.0's Nemotron-4 15B recipe runs Transformer Engine's fused cross-entropy: every plan
  // for it keeps that loss; planned for Megatron-LM, none does.
  auto fusions = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--experiment", "dgxc2505-nemotron4-15b-16xh100-bf16", "--no-simgrid", "--json", "--top", "5"};
    a.insert(a.end(), extra.begin(), extra.end());
    const Outcome o = plan(a);
    EXPECT_EQ(o.rc, 0) << o.err;
    std::vector<std::string> out;
    const nlohmann::json j = nlohmann::json::parse(o.out);  // kept: a range-for over a temporary's member dangles
    for (const auto& row : j["ranked"])
      out.push_back(row["plan"]["cross_entropy_fusion"].get<std::string>());
    return out;
  };
  const auto core = fusions({}), lm = fusions({"--framework", "megatron"});
  ASSERT_FALSE(core.empty());
  ASSERT_FALSE(lm.empty());
  for (const auto& f : core) EXPECT_EQ(f, "te");
  for (const auto& f : lm) EXPECT_EQ(f, "none");
}

TEST(PlanCli, TheRecipesDeferredHeadWeightGradientsCarryOverToPipelinedPlans) {
  // dgxc-benchmarking's Nemotron-4 340B recipe defers the LM head's weight gradients (limit 22):
  // every pipelined Megatron-Core plan for it keeps the deferral and its limit, an unpipelined one
  // cannot have it (Megatron-Core refuses it without a pipeline).
  const Outcome o = plan({"--experiment", "dgxc2411-nemotron4-340b-128xh100-bf16", "--no-simgrid", "--json", "--top", "8"});
  ASSERT_EQ(o.rc, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  ASSERT_FALSE(j["ranked"].empty());
  for (const auto& row : j["ranked"]) {
    const nlohmann::json& p = row["plan"];
    const bool pipelined = p["pp"].get<int>() > 1;
    EXPECT_EQ(p.value("defer_embedding_wgrad", false), pipelined) << p.dump();
    EXPECT_EQ(p.value("wgrad_deferral_limit", 0), pipelined ? 22 : 0) << p.dump();
  }
}

TEST(PlanCli, ProgressGoesToStderrAndNeverIntoJson) {
  // A bar (forced: the test has no terminal) redrawn in place with count, rate and time left.
  ::setenv("FORESIGHT_PROGRESS", "bar", 1);
  const Outcome bar = plan({"--experiment", "sc21-table1-1.7b", "--no-simgrid", "--json", "--top", "3"});
  ::unsetenv("FORESIGHT_PROGRESS");
  ASSERT_EQ(bar.rc, 0) << bar.err;
  EXPECT_NE(bar.err.find("\rplan: evaluating plans ["), std::string::npos) << bar.err;
  EXPECT_NE(bar.err.find("plans/s"), std::string::npos) << bar.err;
  EXPECT_EQ(bar.out.find("evaluating"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::accept(bar.out)) << bar.out;
  // Without a terminal: one line when the stage starts and one when it ends.
  const Outcome lines = plan({"--experiment", "sc21-table1-1.7b", "--no-simgrid", "--top", "3"});
  EXPECT_NE(lines.err.find("plan: evaluating plans: "), std::string::npos) << lines.err;
  EXPECT_NE(lines.err.find("plan: evaluating plans: done, "), std::string::npos) << lines.err;
  EXPECT_EQ(lines.err.find('\r'), std::string::npos);
  // A mode it does not know is refused, named, not replaced by a default.
  ::setenv("FORESIGHT_PROGRESS", "sideways", 1);
  const Outcome bad = plan({"--experiment", "sc21-table1-1.7b", "--no-simgrid", "--top", "3"});
  ::unsetenv("FORESIGHT_PROGRESS");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("FORESIGHT_PROGRESS = sideways: must be bar, lines or off"), std::string::npos) << bad.err;
}

// The experiment's precision carries over to --model/--cluster unless --dtype says otherwise, and
// one the cluster's GPU has no peak for is a user error naming where it came from and what the GPU
// has: MT-NLG's bf16 on the V100s of a p3.16xlarge (fp16 and fp32 only), before any plan is priced.
TEST(PlanCli, DtypeMustBeOneTheGpuHas) {
  const std::vector<std::string> p3 = {"plan", "--model", "gpt3-1.3b", "--cluster", "aws-p3-16xlarge", "--gpus", "8",
                                       "--global-batch", "16", "--no-simgrid", "--top", "2"};
  {
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli(p3, out, err), 2) << err.str();
    EXPECT_NE(err.str().find("training.dtype (of --experiment mt-nlg-530b-selene-280) = bf16"), std::string::npos)
        << err.str();
    EXPECT_NE(err.str().find("v100-sxm2-16gb has no bf16 peak"), std::string::npos) << err.str();
    EXPECT_NE(err.str().find("(fp16, fp32)"), std::string::npos) << err.str();
    EXPECT_TRUE(out.str().empty());
  }
  {
    std::vector<std::string> args = p3;
    args.insert(args.end(), {"--dtype", "fp16", "--json"});
    std::ostringstream out, err;
    ASSERT_EQ(foresight::cli::run_cli(args, out, err), 0) << err.str();
    const auto j = nlohmann::json::parse(out.str());
    EXPECT_EQ(j["dtype"], "fp16");
    EXPECT_FALSE(j.contains("fp8_scaling"));
    EXPECT_FALSE(j["ranked"].empty());
  }
  {
    std::ostringstream out, err;  // a scaling recipe without FP8
    EXPECT_EQ(foresight::cli::run_cli({"plan", "--fp8-scaling", "rowwise", "--no-simgrid"}, out, err), 2);
    EXPECT_NE(err.str().find("--fp8-scaling = rowwise: applies to FP8 training only"), std::string::npos) << err.str();
  }
  {
    std::ostringstream out, err;  // not a training precision
    EXPECT_EQ(foresight::cli::run_cli({"plan", "--dtype", "tf32", "--no-simgrid"}, out, err), 2);
    EXPECT_NE(err.str().find("--dtype = tf32: must be one of: bf16, fp16, fp8, fp32"), std::string::npos) << err.str();
  }
}

TEST(PlanCli, Fp8RecipeTheFrameworkOrGpuDoesNotRunIsNamedBeforeSearching) {
  // MXFP8 is Transformer Engine's and Blackwell's: on an H100, or under torchao, the request is a
  // user error naming the option and the rule (exit 2), not "no plan fits".
  struct Case { std::vector<std::string> args; const char* says; };
  for (const Case& c : {Case{{"--experiment", "mbridge2604-llama3-70b-64xh100-fp8", "--fp8-scaling", "mxfp8"},
                             "--fp8-scaling = mxfp8: needs a GPU with block-scaled FP8 tensor cores"},
                        Case{{"--experiment", "torchtitan-202412-t1-llama3.1-8b-8xh100-fsdp", "--dtype", "fp8",
                              "--fp8-scaling", "mxfp8"},
                             "torchtitan runs torchao's float8"}}) {
    std::vector<std::string> args = {"plan", "--no-simgrid"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli(args, out, err), 2) << err.str();
    EXPECT_NE(err.str().find(c.says), std::string::npos) << err.str();
    EXPECT_TRUE(out.str().empty());
  }
  // On DGX B200 the same recipe plans, and megatron_args.txt carries it.
  const std::string dir = ::testing::TempDir() + "plan_mxfp8";
  std::ostringstream out, err;
  ASSERT_EQ(foresight::cli::run_cli({"plan", "--experiment", "mbridge2509-llama3-8b-8xb200-mxfp8", "--no-simgrid",
                                     "--top", "1", "--out", dir},
                                    out, err),
            0)
      << err.str();
  std::ifstream args_file(dir + "/megatron_args.txt");
  const std::string args((std::istreambuf_iterator<char>(args_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(args.find("--fp8-recipe mxfp8"), std::string::npos) << args;
}

TEST(PlanCli, DeepSpeedPlansGetTheirConfigAndOthersLeaveNoneBehind) {
  // plan --out for a DeepSpeed search writes ds_config.json beside plan.json, its batch identity
  // matching the plan; a later Megatron-LM search into the same folder removes it.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("foresight-plan-out-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::ostringstream out, err;
  int rc = foresight::cli::run_cli({"plan", "--model", "gpt3-1.3b", "--cluster", "selene", "--gpus", "16",
                                    "--global-batch", "64", "--framework", "deepspeed", "--no-simgrid", "--top", "3",
                                    "--out", dir.string()},
                                   out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("megatron_args.txt and ds_config.json"), std::string::npos) << out.str();
  ASSERT_TRUE(std::filesystem::exists(dir / "ds_config.json"));
  std::ifstream plan_file(dir / "plan.json"), ds_file(dir / "ds_config.json");
  const nlohmann::json plan = nlohmann::json::parse(plan_file), ds = nlohmann::json::parse(ds_file);
  EXPECT_EQ(ds["train_batch_size"], 64);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], plan["plan"]["micro_batch"]);
  EXPECT_EQ(ds["train_batch_size"].get<int>(), ds["train_micro_batch_size_per_gpu"].get<int>() *
                                                   ds["gradient_accumulation_steps"].get<int>() *
                                                   plan["plan"]["dp"].get<int>());
  EXPECT_EQ(ds["zero_optimization"]["stage"], plan["plan"]["zero"]);
  out.str("");
  rc = foresight::cli::run_cli({"plan", "--model", "gpt3-1.3b", "--cluster", "selene", "--gpus", "16",
                                "--global-batch", "64", "--no-simgrid", "--top", "3", "--out", dir.string()},
                               out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_FALSE(std::filesystem::exists(dir / "ds_config.json"));
  EXPECT_NE(out.str().find("launch.sh and megatron_args.txt"), std::string::npos) << out.str();
  std::filesystem::remove_all(dir);
}

TEST(PlanCli, FmsFsdpPlansWriteItsLaunchLine) {
  // An fms-fsdp search for Llama 2 7B on the 128 A100s of its README writes fms-fsdp's own launch
  // line beside plan.json: the variant, the plan's per-GPU batch (one micro-batch a step) and its
  // sharding; a search for another framework into the same folder removes it.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("foresight-plan-fms-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::ostringstream out, err;
  int rc = foresight::cli::run_cli({"plan", "--model", "llama2-7b", "--cluster", "aws-p4de", "--gpus", "128",
                                    "--global-batch", "256", "--framework", "fms-fsdp", "--no-simgrid", "--top", "3",
                                    "--out", dir.string()},
                                   out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("megatron_args.txt and fms_fsdp_launch.txt"), std::string::npos) << out.str();
  std::ifstream plan_file(dir / "plan.json"), launch_file(dir / "fms_fsdp_launch.txt");
  const nlohmann::json plan = nlohmann::json::parse(plan_file);
  std::string launch;
  std::getline(launch_file, launch);
  EXPECT_EQ(plan["plan"]["micro_batch"].get<int>() * plan["plan"]["dp"].get<int>(), 256);
  EXPECT_NE(launch.find("--model_variant=llama2_7b "), std::string::npos) << launch;
  EXPECT_NE(launch.find("--batch_size=" + std::to_string(plan["plan"]["micro_batch"].get<int>()) + " "),
            std::string::npos)
      << launch;
  const bool hybrid = plan["plan"].contains("shard_group") && plan["plan"]["shard_group"].get<int>() == 8;
  EXPECT_NE(launch.find(hybrid ? "--sharding_strategy=hsdp" : "--sharding_strategy=fsdp"), std::string::npos) << launch;
  out.str("");
  rc = foresight::cli::run_cli({"plan", "--model", "llama2-7b", "--cluster", "aws-p4de", "--gpus", "128",
                                "--global-batch", "256", "--framework", "torchtitan", "--no-simgrid", "--top", "3",
                                "--out", dir.string()},
                               out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_FALSE(std::filesystem::exists(dir / "fms_fsdp_launch.txt"));
  std::filesystem::remove_all(dir);
}

TEST(PlanCli, CompileOnPlansUnderTorchCompileWhereTheFrameworkHasIt) {
  // torchtitan eager (the default experiment compiles nothing) never offers async TP, which is an
  // Inductor pass; with --compile on every candidate compiles and async TP ranks. A framework
  // without torch.compile, or another value, is a user error (exit 2) naming the option.
  auto plans = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "--model", "llama3.1-8b", "--cluster", "dgx-h100-superpod", "--gpus", "16",
                                     "--global-batch", "64", "--framework", "torchtitan", "--no-simgrid", "--top", "20",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli(args, out, err), 0) << err.str();
    return nlohmann::json::parse(out.str())["ranked"];
  };
  int compiled = 0, async_tp = 0;
  for (const auto& row : plans({})) {
    EXPECT_FALSE(row["plan"]["compile"].get<bool>()) << row["plan"].dump();
    EXPECT_FALSE(row["plan"]["tp_overlap"].get<bool>()) << row["plan"].dump();
  }
  for (const auto& row : plans({"--compile", "on"})) {
    compiled += row["plan"]["compile"].get<bool>();
    async_tp += row["plan"]["tp_overlap"].get<bool>();
  }
  EXPECT_EQ(compiled, 20);
  EXPECT_GT(async_tp, 0);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--framework", "megatron-core", "--compile", "on"},
        std::vector<std::string>{"--framework", "torchtitan", "--compile", "yes"}}) {
    std::vector<std::string> args = {"plan", "--model", "llama3.1-8b", "--cluster", "dgx-h100-superpod", "--gpus", "16",
                                     "--no-simgrid"};
    args.insert(args.end(), bad.begin(), bad.end());
    std::ostringstream out, err;
    EXPECT_EQ(foresight::cli::run_cli(args, out, err), 2) << err.str();
    EXPECT_NE(err.str().find("--compile = "), std::string::npos) << err.str();
  }
}


// A count that is not a positive whole number is refused with the rule and the value, not with
// CLI11's "not in range 0.000000 to 1797..." (the largest double) or a bare "Could not convert".
TEST(PlanCli, CountsOutOfRangeNameTheRuleAndTheValue) {
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"--gpus", "-8"}, {"--gpus", "0"}, {"--gpus", "99999999999"}, {"--global-batch", "1.5"}, {"--pick", "0"}}) {
    const Outcome o = plan({"--experiment", "sc21-table1-1.7b", "--no-simgrid", option, value});
    EXPECT_EQ(o.rc, 2) << option << " " << value;
    EXPECT_NE(o.err.find(option + ": must be a whole number from 1 to 2147483647 (got '" + value + "')"),
              std::string::npos)
        << o.err;
    EXPECT_EQ(o.err.find("1797"), std::string::npos) << o.err;
  }
  const Outcome threads = plan({"--experiment", "sc21-table1-1.7b", "--no-simgrid", "--threads", "-1"});
  EXPECT_EQ(threads.rc, 2);
  EXPECT_NE(threads.err.find("--threads: must be a whole number from 0"), std::string::npos) << threads.err;
}
