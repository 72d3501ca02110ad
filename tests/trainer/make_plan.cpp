// Writes the plan.json of one trainer test layout through the one plan.json writer
// (core/plan_json.hpp, driven by core/spec_fields.hpp), so that the test plans cannot drift from
// the schema the planner emits and the trainer reads.
//   trainer_make_plan OUT TP PP DP PLACEMENT SCHEDULE RECOMPUTE ZERO EXTRA CHECKPOINT_DIR
// The tiny model: 4 layers, hidden 32, 4 heads, sequence 16, byte vocabulary 256, global batch 8
// in micro-batches of 1, fp32, Adam, 20 steps on the text corpus. EXTRA adds plan fields,
// '+'-separated ("-" for none): vsN virtual_stages N, sp sequence_parallel, offF
// offload.activations F, slA,B,.. token_slices, layersA,B,.. stage_layers, epN ep N, dpoverlap dp_overlap, offopt
// offload.optimizer, rclN recompute_layers N, swiglu / untied a gated-MLP / untied-head model, cp2 context parallelism 2, moe a MoE model (4 experts, top-2, capacity factor 1.25, every other layer), mtp one multi-token prediction module, cete Transformer Engine's fused cross-entropy.
// No plan rule is checked here: refused layouts are written too, for the trainer to refuse.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "core/plan_json.hpp"

using namespace foresight;

namespace {
[[noreturn]] void usage(const std::string& why) {
  std::cerr << "trainer_make_plan: " << why
            << "\nusage: trainer_make_plan OUT TP PP DP PLACEMENT SCHEDULE RECOMPUTE ZERO EXTRA CHECKPOINT_DIR\n";
  std::exit(2);
}
template <class E>
E parse_or_die(const std::string& s) {
  if (auto e = parse_enum<E>(s)) return *e;
  usage("'" + s + "' is not one of " + allowed_values<E>());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 11) usage("expected 10 arguments");
  PlanSpec q;
  q.framework = Framework::foresight_train;  // the trainer's own entry: it runs uneven splits
  q.tp = std::stoi(argv[2]);
  q.pp = std::stoi(argv[3]);
  q.dp = std::stoi(argv[4]);
  q.placement = parse_or_die<Placement>(argv[5]);
  q.schedule = parse_or_die<Schedule>(argv[6]);
  q.recompute = parse_or_die<Recompute>(argv[7]);
  q.zero = std::stoi(argv[8]);
  std::optional<MoeSpec> moe;
  std::stringstream extra(argv[9]);
  for (std::string flag; std::getline(extra, flag, '+');) {
    if (flag == "-" || flag.empty()) continue;
    if (flag.rfind("vs", 0) == 0) q.virtual_stages = std::stoi(flag.substr(2));
    else if (flag == "sp") q.sequence_parallel = true;
    else if (flag == "dpoverlap") q.dp_overlap = true;
    else if (flag == "offopt") q.offload.optimizer = true;
    else if (flag == "cete") q.cross_entropy_fusion = CrossEntropyFusion::te;
    else if (flag.rfind("rcl", 0) == 0) q.recompute_layers = std::stoi(flag.substr(3));
    else if (flag.rfind("off", 0) == 0) q.offload.activations = std::stod(flag.substr(3));
    else if (flag.rfind("ep", 0) == 0) q.ep = std::stoi(flag.substr(2));
    else if (flag.rfind("layers", 0) == 0) {
      std::stringstream counts(flag.substr(6));
      for (std::string s; std::getline(counts, s, ',');) q.stage_layers.push_back(std::stoi(s));
    }
    else if (flag.rfind("sl", 0) == 0) {
      std::stringstream slices(flag.substr(2));
      for (std::string s; std::getline(slices, s, ',');) q.token_slices.push_back(std::stoi(s));
    } else if (flag == "swiglu" || flag == "untied" || flag == "cp2" || flag == "mtp") {
      // handled below, on the model or the plan
      if (flag == "cp2") q.cp = 2;
    } else if (flag == "moe") {
      moe = MoeSpec{.experts = 4, .top_k = 2, .capacity_factor = 1.25, .every = 2};
    } else {
      usage("unknown flag '" + flag + "'");
    }
  }
  ModelSpec tiny{.name = "tiny", .layers = 4, .hidden = 32, .heads = 4, .seq_len = 16, .vocab = 256, .ffn_hidden = 128,
                 .kv_heads = 4, .moe = moe};
  if (std::string(argv[9]).find("swiglu") != std::string::npos) tiny.activation = Activation::swiglu;
  if (std::string(argv[9]).find("untied") != std::string::npos) tiny.tie_embeddings = false;
  if (std::string(argv[9]).find("mtp") != std::string::npos) tiny.mtp_layers = 1;
  const ExecutablePlan p{
      .model = std::move(tiny),
      .cluster = "ci",
      .gpus_per_node = 8,
      .training = {.global_batch = 8, .dtype = Dtype::fp32, .optimizer = Optimizer::adam},
      .plan = q,
      .gpus = q.gpus(),
      .data = "text",
      .steps = 20,
      .checkpoint_dir = argv[10],
      .prediction = PlanPrediction{.iteration_s = 0.05, .tokens_per_s = 2560, .tflops_per_gpu = 0.001,
                                   .memory_GB = 0.01, .engine = "hand-written for the test"}};
  std::ofstream out(argv[1]);
  out << to_json(p).dump(2) << "\n";
  return out ? 0 : 1;
}
