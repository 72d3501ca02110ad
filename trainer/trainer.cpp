#include "trainer/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/framework.hpp"
#include "trainer/backend.hpp"
#include "trainer/bootstrap.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/data.hpp"
#include "trainer/gpt.hpp"
#include "trainer/grad_sync.hpp"
#include "trainer/layout.hpp"
#include "trainer/schedule.hpp"
#include "trainer/staging_communicator.hpp"

namespace foresight::trainer {

void agree(Communicator& world, const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (const SpecError&) {
    error = std::current_exception();
  }
  // max over (size - rank) of the failing ranks identifies the lowest failing rank.
  double v[1] = {error ? double(world.size() - world.rank()) : 0.0};
  world.all_reduce(v, ReduceOp::max);
  if (v[0] == 0) return;
  const int first = world.size() - int(v[0]);
  if (world.rank() == first) std::rethrow_exception(error);
  throw PeerFailure(first);
}

void check_runnable(const ExecutablePlan& p, const std::string& file, int world_size) {
  const SourceLocation where{file, 0, 0};
  const PlanSpec& q = p.plan;
  if (world_size != p.gpus)
    throw SpecError(where, "gpus", std::to_string(p.gpus),
                    "the plan needs " + std::to_string(p.gpus) + " ranks but " + std::to_string(world_size) +
                        " were launched (mpirun -np " + std::to_string(p.gpus) + ")");
  auto unsupported = [&](const std::string& field, const std::string& value, const std::string& what) {
    throw SpecError(where, field, value, "foresight-train does not run " + what + " yet");
  };
  if (q.sequence_parallel && q.tp > 1)
    for (int len : q.token_slices)
      if ((std::int64_t(q.micro_batch) * len) % q.tp != 0)
        throw SpecError(where, "plan.token_slices", std::to_string(len),
                        "with plan.sequence_parallel every slice times plan.micro_batch must be a multiple of plan.tp = " +
                            std::to_string(q.tp) + " (a slice's tokens are split over the group)");
  if (q.sequence_parallel && q.tp > 1 && (std::int64_t(q.micro_batch) * p.model.seq_len) % q.tp != 0)
    throw SpecError(where, "plan.sequence_parallel", "true",
                    "needs plan.micro_batch * model.seq_len = " + std::to_string(q.micro_batch * p.model.seq_len) +
                        " to be a multiple of plan.tp = " + std::to_string(q.tp) + " (tokens are split over the group)");
  // What it runs is its FrameworkTraits entry (core/framework.cpp, foresight-train): the one list
  // the planner also obeys, so `foresight plan --framework foresight-train` offers only plans it
  // runs. A plan written for another framework is held to the same entry, after the fields the
  // trainer maps onto its own execution: a partition_method split becomes the stage layer counts
  // that method yields (it trains that split), DeepSpeed's reduce_bucket gives way to
  // --dp-bucket-kB, and a fused gradient accumulation is the same sum taken after the GEMM.
  const FrameworkTraits& own = framework_traits(Framework::foresight_train);
  PlanSpec mine = q;
  if (!mine.partition_method.empty()) {
    mine.stage_layers = stage_layer_counts(p.model, q);
    mine.partition_method.clear();
  }
  mine.reduce_bucket = 0;
  mine.gradient_accumulation_fusion.reset();
  mine.p2p_overlap.reset();
  mine.fused_softmax.reset();  // a softmax pricing detail of Megatron's kernels; the trainer runs its own
  mine.zero3_prefetch.reset();  // which DeepSpeed ZeRO-3 release to price; the trainer has no ZeRO-3
  mine.partitioned_pipe_grads.reset();  // which DeepSpeed release's p2p to price; the trainer sends its own way
  if (auto v = own.refusal(mine)) throw SpecError(where, v->field, v->value, v->rule);
  if (auto v = own.model_refusal(p.model)) throw SpecError(where, v->field, v->value, v->rule);
  if (p.training.optimizer != Optimizer::adam)
    unsupported("training.optimizer", to_string(p.training.optimizer), "optimizers other than AdamW");
  if (p.training.optimizer_state_dtype != Dtype::fp32)
    unsupported("training.optimizer_state_dtype", to_string(p.training.optimizer_state_dtype),
                "an optimizer state other than fp32 (fp32 master weights and moments)");
  if (p.model.moe) {
    const std::string moe =
        std::to_string(p.model.moe->experts) + " experts, top_k " + std::to_string(p.model.moe->top_k);
    if (q.token_slices.size() > 1) unsupported("model.moe", moe, "Mixture-of-Experts layers with TeraPipe slices");
  }
  if (p.model.vocab % q.tp != 0)
    throw SpecError(where, "model.vocab", std::to_string(p.model.vocab),
                    "must be a multiple of plan.tp = " + std::to_string(q.tp) + " (vocabulary-parallel embedding)");
}

namespace {

using Clock = std::chrono::steady_clock;

/// The tokens of micro-batch `mb` of data-parallel replica `dp_rank`: samples
/// [dp_rank * G/dp + mb * micro_batch, ... + micro_batch) of the global batch, so every layout
/// splits the same global batch.
MicroBatch make_micro_batch(const TokenSource& source, const ExecutablePlan& p, int dp_rank, int step, int mb) {
  const int S = p.model.seq_len, b = p.plan.micro_batch;
  const std::int64_t first = std::int64_t(dp_rank) * (p.training.global_batch / p.plan.dp) + std::int64_t(mb) * b;
  MicroBatch out;
  out.inputs.resize(std::size_t(b) * S);
  out.targets.resize(std::size_t(b) * S);
  std::vector<std::int32_t> seq(std::size_t(S) + 1);
  for (int i = 0; i < b; ++i) {
    source.sample(step, first + i, seq);
    std::copy(seq.begin(), seq.end() - 1, out.inputs.begin() + std::ptrdiff_t(i) * S);
    std::copy(seq.begin() + 1, seq.end(), out.targets.begin() + std::ptrdiff_t(i) * S);
  }
  return out;
}

}  // namespace

RunSummary train(const ExecutablePlan& plan, const std::string& plan_file, const TrainerOptions& opt,
                 Communicator& outer, const std::function<void(const StepRecord&)>& on_step) {
  agree(outer, [&] { check_runnable(plan, plan_file, outer.size()); });
  const std::string data_name = opt.data.value_or(plan.data);
  std::unique_ptr<TokenSource> source;
  std::unique_ptr<Backend> be;
  agree(outer, [&] {
    source = make_token_source(data_name, plan.model.vocab, plan.model.seq_len, opt.seed, plan_file);
    be = make_backend(opt.backend, opt.precision);
  });
  // NCCL: a communicator of its own, bootstrapped over `outer` (MPI). MPI: `outer` itself, which
  // GPU tensors reach through host copies. Every group split from `world` inherits the choice.
  std::unique_ptr<Communicator> own_world;
  if (opt.comm == CommLibrary::nccl)
    agree(outer, [&] { own_world = make_nccl_world(outer, *be); });
  else if (be->device() != Device::host)
    own_world = make_staging_communicator(outer, *be);
  Communicator& world = own_world ? *own_world : outer;
  const RankLayout layout = make_layout(plan.plan, world.rank());
  const int tp = layout.tp, pp = layout.pp, dp = layout.dp;
  // Groups: ranks sharing (pp, dp) form a tensor-parallel group, those sharing (tp, pp) a
  // data-parallel group; the first and last stage with the same (tp, dp) share the tied embedding
  // (every other rank lands in a group of its own).
  auto tp_comm = world.split(layout.pp_rank * dp + layout.dp_rank, layout.tp_rank);
  auto dp_comm = world.split(layout.pp_rank * tp + layout.tp_rank, layout.dp_rank);
  // Expert parallelism is carved out of data parallelism: dp ranks d with the same d / ep form an
  // expert-parallel group (ep rank d % ep), those with the same d % ep hold the same experts.
  const int ep = plan.plan.ep;
  auto ep_comm = world.split((layout.pp_rank * tp + layout.tp_rank) * (dp / ep) + layout.dp_rank / ep, layout.dp_rank % ep);
  auto expert_dp_comm = world.split((layout.pp_rank * tp + layout.tp_rank) * ep + layout.dp_rank % ep, layout.dp_rank / ep);
  const bool holds_embedding = layout.first_stage() || layout.last_stage();
  auto embedding_comm =
      world.split(holds_embedding ? layout.tp_rank * dp + layout.dp_rank : tp * dp + world.rank(), layout.pp_rank);

  const std::string checkpoint_dir = opt.checkpoint_dir.value_or(plan.checkpoint_dir);
  const int steps = opt.steps.value_or(plan.steps);
  OptimizerConfig oc = opt.optimizer;
  oc.total_steps = steps;

  ParamStore store(tp, layout.tp_rank);
  // One stage per model chunk (interleaved schedule: virtual stages), declared in chunk order.
  const int chunks = plan.plan.schedule == Schedule::interleaved ? plan.plan.virtual_stages : 1;
  std::vector<std::unique_ptr<GptStage>> stages;
  // An uneven split (check_plan allows it without interleaving): this rank's layers from the plan.
  const bool uneven = chunks == 1 && plan.plan.uneven_split();
  const int first_layer = uneven ? stage_first_layers(plan.model, plan.plan)[layout.pp_rank] : 0;
  const int own_layers = uneven ? stage_layer_counts(plan.model, plan.plan)[layout.pp_rank] : -1;
  for (int c = 0; c < chunks; ++c)
    stages.push_back(std::make_unique<GptStage>(plan.model, layout,
                                                StageConfig{.micro_batch = plan.plan.micro_batch,
                                                            .recompute = plan.plan.recompute,
                                                            .recompute_layers = plan.plan.recompute_layers,
                                                            .sequence_parallel = plan.plan.sequence_parallel,
                                                            .chunk = c,
                                                            .chunks = chunks,
                                                            .offload_activations = plan.plan.offload.activations,
                                                            .ep_comm = ep_comm.get(),
                                                            .token_slices = plan.plan.token_slices,
                                                            .first_layer = first_layer,
                                                            .layers = own_layers},
                                                store));
  const int embedding_param =
      layout.first_stage() ? stages.front()->embedding_param() : stages.back()->embedding_param();
  // ZeRO-1: each data-parallel rank keeps the AdamW moments of one shard of the parameters,
  // receives the summed gradients of that shard only (a reduce-scatter), updates that shard and
  // all-gathers the parameters after the step.
  const bool zero1 = plan.plan.zero == 1;
  store.allocate(*be, opt.seed, zero1 ? dp : 1, zero1 ? layout.dp_rank : 0);
  GradientReducer reducer(store, *dp_comm, std::max<std::int64_t>(1, opt.dp_bucket_bytes / 4));
  // MoE experts: each expert lives on one rank of its expert-parallel group, so its gradient is
  // summed over the ranks holding the same experts (dp rank % ep alike).
  GradientReducer expert_reducer(store, *expert_dp_comm, std::max<std::int64_t>(1, opt.dp_bucket_bytes / 4),
                                 /*experts=*/true);

  const int micro_batches = plan.plan.micro_batches(plan.training);
  // TeraPipe: every micro-batch runs as `slices` pipeline units (micro-batch * slices + slice).
  const int slices = stages.front()->slices();
  const std::vector<PipelineOp> ops =
      pipeline_ops(plan.plan.schedule, pp, layout.pp_rank, micro_batches * slices, chunks, slices);
  // Each chunk's gradients are final after its last backward in the list: only then may its
  // buckets start their all-reduce.
  std::vector<std::size_t> last_backward(std::size_t(chunks), 0);
  std::vector<PipelineStep> op_steps = pipeline_steps(ops);
  if (opt.one_message_at_a_time) {
    // The executor before pipeline batches, kept to show the stand-in deadlocking on it (tests).
    std::vector<PipelineStep> single;
    for (const PipelineStep& ps : op_steps)
      for (std::size_t i = ps.first; i < ps.first + ps.count; ++i)
        single.push_back(PipelineStep{.first = i, .count = 1, .communication = ps.communication});
    op_steps = single;
  }
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == PipelineOpKind::backward) last_backward[std::size_t(ops[i].chunk)] = i;
  const double global_tokens = double(plan.training.global_batch) * plan.model.seq_len;
  const float loss_scale = float(1.0 / global_tokens);  // token-mean over the global batch
  const double model_flops = model_flops_per_iteration(plan.model, plan.training.global_batch).value();

  RunSummary summary;
  summary.ranks = world.size();
  summary.backend = be->name();
  summary.comm = world.library();
  summary.compute_dtype = be->compute_dtype();
  summary.data = source->describe();
  summary.dp_buckets = zero1 ? (dp > 1 ? 1 : 0) : reducer.buckets();
  summary.dp_reduction = zero1 ? "reduce-scatter" : "all-reduce";
  int start = 0;
  if (opt.resume) agree(world, [&] { start = load_checkpoint(checkpoint_dir, layout, plan.model, opt.seed, store, *be); });
  summary.first_step = start + 1;
  summary.last_step = start;

  for (int step = start + 1; step <= steps; ++step) {
    const auto t0 = Clock::now();
    be->fill(store.padded_grads(), 0.0f);
    std::map<int, MicroBatch> batches;
    std::map<std::pair<int, int>, Tensor> inbox, outbox;  // per (unit, chunk): received / to be sent
    double loss_sum = 0;
    auto batch = [&](int mb) -> const MicroBatch& {
      auto it = batches.find(mb);
      if (it == batches.end()) it = batches.emplace(mb, make_micro_batch(*source, plan, layout.dp_rank, step, mb)).first;
      return it->second;
    };
    const std::function<void(int)> not_yet = [](int) {};
    // (ZeRO-1 reduces once after the backward: its shards do not follow the buckets.)
    const std::function<void(int)> mark_ready = zero1 ? not_yet : [&](int i) {
      reducer.mark_ready(i);
      expert_reducer.mark_ready(i);
    };
    for (const PipelineStep& ps : op_steps) {
      if (ps.communication) {
        // One batch for the run of sends and receives (pipeline_steps): posted together, so no
        // two neighbouring stages wait in lone sends for each other's receives under NCCL.
        std::vector<Transfer> messages;
        for (std::size_t i = ps.first; i < ps.first + ps.count; ++i) {
          const PipelineOp& op = ops[i];
          const std::pair<int, int> key{op.micro_batch, op.chunk};
          const PipelineMessage m = pipeline_message(op, pp, layout.pp_rank, chunks);
          const int peer = layout.world_rank(layout.tp_rank, m.peer_stage, layout.dp_rank);
          if (op.kind == PipelineOpKind::recv_activation || op.kind == PipelineOpKind::recv_gradient) {
            const GptStage& stage = *stages[std::size_t(op.chunk)];
            Tensor t = be->zeros(stage.tokens(op.micro_batch), stage.hidden());
            inbox[key] = t;
            messages.push_back(Transfer{.kind = Transfer::Kind::recv, .tensor = t, .peer = peer, .tag = m.tag});
          } else {
            messages.push_back(Transfer{.kind = Transfer::Kind::send, .tensor = outbox[key], .peer = peer, .tag = m.tag});
            outbox.erase(key);
          }
        }
        world.exchange(messages);
        continue;
      }
      const PipelineOp& op = ops[ps.first];
      const int unit = op.micro_batch, mb = unit / slices;
      const std::pair<int, int> key{unit, op.chunk};
      GptStage& stage = *stages[std::size_t(op.chunk)];
      if (op.kind == PipelineOpKind::forward) {
        outbox[key] = stage.forward(*be, *tp_comm, unit, batch(mb), inbox[key]);
        inbox.erase(key);
        if (stage.has_head()) loss_sum += stage.loss_sum(unit);
      } else {
        // Gradients are final only after the last micro-batch's backward (of each chunk): only
        // then may buckets start their all-reduce.
        outbox[key] = stage.backward(*be, *tp_comm, unit, batch(mb), inbox[key], loss_scale,
                                     ps.first == last_backward[std::size_t(op.chunk)] ? mark_ready : not_yet);
        inbox.erase(key);
        if (op.chunk == 0 && unit % slices == 0) batches.erase(mb);  // its last backward here
      }
    }
    if (zero1) {
      // The tied embedding's two copies are summed first: after the reduce-scatter the first and
      // the last stage would each hold the sums of a different part of it. (Both are sums, so the
      // order changes only the rounding.) ZeRO-1 runs with ep = 1, where the experts' group is dp.
      if (pp > 1 && holds_embedding) embedding_comm->all_reduce(store[embedding_param].grad, ReduceOp::sum);
      reduce_scatter_gradients(*be, store, *dp_comm);
    } else {
      reducer.finish();
      expert_reducer.finish();
      if (pp > 1 && holds_embedding) embedding_comm->all_reduce(store[embedding_param].grad, ReduceOp::sum);
    }

    // Every tensor-parallel rank of the last stage holds the same loss; count one per replica.
    double loss[1] = {layout.last_stage() && layout.tp_rank == 0 ? loss_sum : 0.0};
    world.all_reduce(loss, ReduceOp::sum);
    StepRecord r;
    r.step = step;
    r.loss = loss[0] / global_tokens;
    r.lr = learning_rate(oc, step);
    r.grad_norm = zero1 ? sharded_grad_norm(*be, store, world)
                        : global_grad_norm(*be, store, world, layout.dp_rank == 0, layout.dp_rank < ep);
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
      summary.status = "non-finite " + std::string(std::isfinite(r.loss) ? "gradient norm" : "loss") + " at step " +
                       std::to_string(step);
      summary.steps.push_back(r);
      summary.last_step = step;
      on_step(r);
      break;
    }
    adamw_step(*be, store, oc, step, r.grad_norm);
    if (zero1) {
      // The fp32 master values are gathered, so that every rank's checkpoint holds all of them as
      // under fp32. (Megatron-LM's distributed optimizer gathers the bf16 working copy instead, half
      // the bytes, and keeps only its master shard: the working copy comes out the same.)
      if (dp > 1) {
        Tensor shard = be->zeros_fp32(store.shard_elements(), 1);
        be->copy(shard, store.padded_values().row_slice(store.state_first(), store.shard_elements()));
        dp_comm->all_gather(store.padded_values(), shard);
      }
      if (pp > 1 && holds_embedding) {
        // The tied embedding's two copies were stepped from gradients reduced in different blocks
        // of their stages' reduce-scatters, so for dp >= 3 in different orders: the last stage
        // takes the first stage's values, bit for bit (x + 0 = x), as Megatron keeps them equal.
        const Tensor w = store[embedding_param].master;
        if (!layout.first_stage()) be->fill(w, 0.0f);
        embedding_comm->all_reduce(w, ReduceOp::sum);
      }
    }
    store.update_working_copy(*be);
    double slowest[2] = {std::chrono::duration<double>(Clock::now() - t0).count(), double(be->peak_bytes())};
    world.all_reduce(slowest, ReduceOp::max);
    double offload_bytes[1] = {0};
    for (auto& st : stages) offload_bytes[0] += double(st->take_offload_bytes());
    world.all_reduce(offload_bytes, ReduceOp::sum);
    r.offload_MiB = offload_bytes[0] / 1048576.0;
    r.step_s = slowest[0];
    r.tokens_per_s = global_tokens / r.step_s;
    r.tflops_per_rank = model_flops / r.step_s / world.size() / 1e12;
    if (opt.peak_tflops) r.mfu = r.tflops_per_rank / *opt.peak_tflops;
    r.memory_MiB = slowest[1] / 1048576.0;
    summary.steps.push_back(r);
    summary.last_step = step;
    on_step(r);

    const bool stop = opt.stop_after > 0 && step == opt.stop_after;
    if (step == steps || stop || (opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0))
    {
      agree(world, [&] { save_checkpoint(checkpoint_dir, step, layout, plan.model, opt.seed, store, *be); });
      // agree() returned on every rank, so every rank's file is in place.
      agree(world, [&] {
        if (world.rank() == 0) mark_latest_checkpoint(checkpoint_dir, step);
      });
    }
    if (stop) {
      summary.status = "stopped";
      break;
    }
  }
  return summary;
}

std::string sized_for_gpus_note(const ExecutablePlan& plan, const std::string& backend, int ranks) {
  if (backend.rfind("cpu", 0) != 0) return "";
  const double flops = model_flops_per_iteration(plan.model, plan.training.global_batch).value();
  const double optimistic_s = flops / (1e11 * std::max(1, ranks));
  if (optimistic_s < 60.0) return "";
  std::ostringstream out;
  out << std::setprecision(3) << "this plan does " << flops << " FLOP per step: at least " << optimistic_s
      << " s per step on the " << backend << " backend even at 100 GFLOP/s per rank.";
  if (plan.prediction)
    out << " It was planned for the GPUs of " << plan.cluster << " (predicted " << plan.prediction->iteration_s
        << " s per step, " << plan.prediction->memory_GB << " GB per GPU).";
  out << " On GPUs run " << gpu_train_flags(plan) << " (the plan's launch.sh does).";
  return out.str();
}

}  // namespace foresight::trainer
