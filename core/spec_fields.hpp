// The field tables of the specs a user writes (model, MoE, training, plan, offload): each field's
// name, default and range, listed once. Three visitors walk them: the scenario YAML reader
// (core/scenario.cpp), the plan.json reader (core/plan_json.cpp) and the JSON writer
// (core/spec_json.cpp), so the schema cannot drift between the files a user writes, the plan the
// planner emits and the JSON the commands print. Rules that tie several fields together (heads
// divides hidden, pp divides layers) live in core/plan.hpp's check_model / check_plan.
//
// A visitor has these members, each a template over the field's (possibly const) type:
//   integer(name, int& field, std::optional<int> fallback, long long min)
//   positive(name, double& field, std::optional<double> fallback)      // > 0, finite
//   fraction(name, double& field, std::optional<double> fallback)      // in [0, 1]
//   boolean(name, bool& field, std::optional<bool> fallback)
//   text(name, std::string& field, std::optional<std::string> fallback)
//   enumeration(name, E& field, std::optional<E> fallback)
//   optional_enumeration(name, std::optional<E>& field)                 // absent = unset
//   int_list(name, std::vector<int>& field, long long min)              // absent = empty
//   section(name, S& field)               // nested mapping; every field of S has a fallback
//   optional_section(name, std::optional<S>& field)                     // absent = unset
// A std::nullopt fallback makes the field required. Readers fill the field; the writer prints it.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

#include "core/experiment.hpp"

namespace foresight {

/// What an integer field takes from a number its reader parsed as a double (DeepSpeed-style 5e8,
/// 9.0e7): a finite whole value, clamped to long long's ends so that the range checks after it
/// name the bound. false for a fraction, an infinity or a NaN.
inline bool whole_number(double d, long long& x) {
  if (!std::isfinite(d) || d != std::floor(d)) return false;
  x = d > 9.2e18 ? 9223372036854775807LL : d < -9.2e18 ? -9223372036854775807LL : static_cast<long long>(d);
  return true;
}

template <class S, class T>
concept SpecOf = std::is_same_v<std::remove_const_t<S>, T>;

template <class V, SpecOf<MoeSpec> S>
void visit_fields(V& v, S& m) {
  v.integer("experts", m.experts, std::nullopt, 1);
  v.integer("top_k", m.top_k, 1, 1);
  v.positive("capacity_factor", m.capacity_factor, 1.0);
  v.integer("every", m.every, 1, 1);
  v.boolean("dropless", m.dropless, false);
  v.positive("imbalance", m.imbalance, 1.0);
  v.integer("expert_ffn_hidden", m.expert_ffn_hidden, 0, 0);
  v.integer("shared_experts", m.shared_experts, 0, 0);
  v.integer("first_dense", m.first_dense, 0, 0);
  v.integer("max_nodes", m.max_nodes, 0, 0);
}

/// ffn_hidden and kv_heads read as 0 when absent; complete_model() then gives them their
/// defaults (4 * hidden, heads), so a written spec always carries the resolved values.
template <class V, SpecOf<MlaSpec> S>
void visit_fields(V& v, S& a) {
  v.integer("q_lora_rank", a.q_lora_rank, 0, 0);
  v.integer("kv_lora_rank", a.kv_lora_rank, 512, 1);
  v.integer("qk_nope_head_dim", a.qk_nope_head_dim, 128, 1);
  v.integer("qk_rope_head_dim", a.qk_rope_head_dim, 64, 0);
  v.integer("v_head_dim", a.v_head_dim, 128, 1);
}

template <class V, SpecOf<AttentionWindowSpec> S>
void visit_fields(V& v, S& w) {
  v.integer("size", w.size, std::nullopt, 1);
  v.int_list("pattern", w.pattern, 0);
}

template <class V, SpecOf<ModelSpec> S>
void visit_fields(V& v, S& m) {
  v.text("name", m.name, std::nullopt);
  v.integer("layers", m.layers, std::nullopt, 1);
  v.integer("hidden", m.hidden, std::nullopt, 1);
  v.integer("heads", m.heads, std::nullopt, 1);
  v.integer("seq_len", m.seq_len, std::nullopt, 1);
  v.integer("vocab", m.vocab, std::nullopt, 1);
  v.integer("ffn_hidden", m.ffn_hidden, 0, 1);
  v.integer("kv_heads", m.kv_heads, 0, 1);
  v.optional_section("moe", m.moe);
  v.optional_section("mla", m.mla);
  v.enumeration("activation", m.activation, Activation::gelu);
  v.integer("head_dim", m.attention_head_dim, 0, 0);
  v.boolean("tie_embeddings", m.tie_embeddings, true);
  v.enumeration("position_embedding", m.position, PositionEmbedding::learned);
  v.enumeration("norm", m.norm, Norm::layernorm);
  v.boolean("bias", m.bias, true);
  v.optional_section("attention_window", m.attention_window);
  v.boolean("attention_sinks", m.attention_sinks, false);
  v.boolean("parallel_block", m.parallel_block, false);
  v.integer("parallel_block_norms", m.parallel_block_norms, 1, 1);
  v.integer("mtp_layers", m.mtp_layers, 0, 0);
  v.optional_boolean("dropout", m.dropout);
}

template <class V, SpecOf<TrainingSpec> S>
void visit_fields(V& v, S& t) {
  v.integer("global_batch", t.global_batch, std::nullopt, 1);
  v.enumeration("dtype", t.dtype, Dtype::bf16);
  v.enumeration("fp8_scaling", t.fp8_scaling, Fp8Scaling::delayed);
  v.enumeration("optimizer", t.optimizer, Optimizer::adam);
  v.enumeration("optimizer_state_dtype", t.optimizer_state_dtype, Dtype::fp32);
  v.boolean("burst_clocks", t.burst_clocks, false);
}

template <class V, SpecOf<OffloadSpec> S>
void visit_fields(V& v, S& o) {
  v.boolean("optimizer", o.optimizer, false);
  v.fraction("activations", o.activations, 0.0);
}

template <class V, SpecOf<RecomputeModules> S>
void visit_fields(V& v, S& r) {
  v.boolean("layernorm", r.layernorm, false);
  v.boolean("mla_up_proj", r.mla_up_proj, false);
  v.boolean("moe_act", r.moe_act, false);
  v.boolean("mlp", r.mlp, false);
  v.boolean("moe", r.moe, false);
  v.boolean("shared_experts", r.shared_experts, false);
}

template <class V, SpecOf<PlanSpec> S>
void visit_fields(V& v, S& p) {
  v.integer("tp", p.tp, std::nullopt, 1);
  v.integer("pp", p.pp, std::nullopt, 1);
  v.integer("dp", p.dp, std::nullopt, 1);
  v.integer("cp", p.cp, 1, 1);
  v.enumeration("cp_comm", p.cp_comm, CpComm::ring);
  v.integer("cp_a2a", p.cp_a2a, 0, 0);
  v.integer("micro_batch", p.micro_batch, std::nullopt, 1);
  v.enumeration("schedule", p.schedule, Schedule::one_f_one_b);
  v.integer("virtual_stages", p.virtual_stages, 1, 1);
  v.boolean("sequence_parallel", p.sequence_parallel, false);
  v.boolean("dp_overlap", p.dp_overlap, false);
  v.boolean("tp_overlap", p.tp_overlap, false);
  v.enumeration("recompute", p.recompute, Recompute::none);
  v.boolean("compile", p.compile, false);
  v.boolean("compile_loss", p.compile_loss, false);
  v.enumeration("cross_entropy_fusion", p.cross_entropy_fusion, CrossEntropyFusion::none);
  v.integer("recompute_layers", p.recompute_layers, 0, 0);
  v.integer("partial_recompute_microbatches", p.partial_recompute_microbatches, 0, 0);
  v.integer("zero", p.zero, 0, 0);
  v.integer("shard_group", p.shard_group, 0, 0);
  v.boolean("reshard_after_forward", p.reshard_after_forward, true);
  v.boolean("param_gather_overlap", p.param_gather_overlap, false);
  v.boolean("fp8_param_gather", p.fp8_param_gather, false);
  v.integer("reduce_bucket", p.reduce_bucket, 0, 0);
  v.section("offload", p.offload);
  v.section("recompute_modules", p.recompute_modules);
  v.integer("ep", p.ep, 1, 1);
  v.integer("expert_tp", p.expert_tp, 0, 0);
  v.boolean("ep_overlap", p.ep_overlap, false);
  v.enumeration("ep_dispatcher", p.ep_dispatcher, EpDispatcher::nccl);
  v.boolean("moe_permute_fusion", p.moe_permute_fusion, false);
  v.boolean("moe_shared_expert_overlap", p.moe_shared_expert_overlap, false);
  v.boolean("defer_embedding_wgrad", p.defer_embedding_wgrad, false);
  v.integer("wgrad_deferral_limit", p.wgrad_deferral_limit, 0, 0);
  v.int_list("token_slices", p.token_slices, 1);
  v.int_list("stage_layers", p.stage_layers, 0);
  v.integer("first_stage_layers", p.first_stage_layers, 0, 0);
  v.integer("last_stage_layers", p.last_stage_layers, 0, 0);
  v.text("partition_method", p.partition_method, std::string());
  v.enumeration("framework", p.framework, Framework::megatron);
  v.optional_enumeration("attention", p.attention);
  v.optional_enumeration("reduce_dtype", p.reduce_dtype);
  v.optional_boolean("gradient_accumulation_fusion", p.gradient_accumulation_fusion);
  v.optional_boolean("p2p_overlap", p.p2p_overlap);
  v.optional_enumeration("optimizer_impl", p.optimizer_impl);
  v.optional_boolean("fused_softmax", p.fused_softmax);
  v.boolean("bf16_optimizer", p.bf16_optimizer, false);
  v.optional_boolean("partitioned_pipe_grads", p.partitioned_pipe_grads);
  v.optional_boolean("zero3_prefetch", p.zero3_prefetch);
  v.enumeration("placement", p.placement, Placement::tp_dp_pp);
}

/// What every field-table reader does the same way, whatever the format: a nested section is read
/// by a reader of the same kind over the child mapping, an optional one only when present. Derived
/// provides present(key) and nested(key, fn): fn run with a Derived reader over the child, whose
/// unknown keys are then refused.
template <class Derived>
class SectionReading {
 public:
  template <class S>
  void section(const char* k, S& s) {
    static_cast<Derived&>(*this).nested(k, [&s](Derived& v) { visit_fields(v, s); });
  }
  template <class S>
  void optional_section(const char* k, std::optional<S>& s) {
    if (!static_cast<Derived&>(*this).present(k)) return;
    s.emplace();
    section(k, *s);
  }
};

/// Gives ffn_hidden and kv_heads their defaults where the file left them out (read as 0):
/// 4 * hidden and heads. The violation names the field when 4 * hidden overflows an int.
std::optional<PlanViolation> complete_model(ModelSpec& m);

}  // namespace foresight
