// Closed sets of the scenario vocabulary as enum classes. Each enum's names are written once, in
// its EnumNames table; to_string, parse and the "allowed values" list of an error all read it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace foresight {

template <class E>
struct EnumNames;  // specialised below: static constexpr std::array<std::pair<E, const char*>, N> kList

#define FORESIGHT_ENUM_NAMES(E, ...)                                   \
  template <>                                                          \
  struct EnumNames<E> {                                                \
    static constexpr auto kList = std::to_array<std::pair<E, const char*>>({__VA_ARGS__}); \
  }

enum class Schedule { gpipe, one_f_one_b, interleaved, terapipe };
FORESIGHT_ENUM_NAMES(Schedule, {Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"},
                     {Schedule::interleaved, "interleaved"}, {Schedule::terapipe, "terapipe"});

enum class Recompute { none, selective, full };
FORESIGHT_ENUM_NAMES(Recompute, {Recompute::none, "none"}, {Recompute::selective, "selective"},
                     {Recompute::full, "full"});

enum class Dtype { fp32, tf32, fp16, bf16, fp8 };
FORESIGHT_ENUM_NAMES(Dtype, {Dtype::fp32, "fp32"}, {Dtype::tf32, "tf32"}, {Dtype::fp16, "fp16"},
                     {Dtype::bf16, "bf16"}, {Dtype::fp8, "fp8"});

enum class Optimizer { adam, sgd };
FORESIGHT_ENUM_NAMES(Optimizer, {Optimizer::adam, "adam"}, {Optimizer::sgd, "sgd"});

/// How GPUs inside one node are connected.
enum class IntraFabric { nvswitch, nvlink_mesh, pcie };
FORESIGHT_ENUM_NAMES(IntraFabric, {IntraFabric::nvswitch, "nvswitch"},
                     {IntraFabric::nvlink_mesh, "nvlink-mesh"}, {IntraFabric::pcie, "pcie"});

/// How nodes are connected.
enum class NetworkTopology { fat_tree, ethernet };
FORESIGHT_ENUM_NAMES(NetworkTopology, {NetworkTopology::fat_tree, "fat-tree"},
                     {NetworkTopology::ethernet, "ethernet"});

/// Whose FLOP count a published TFLOP/s figure uses (see shared/published conventions).
enum class FlopsDefinition { hardware, model };
FORESIGHT_ENUM_NAMES(FlopsDefinition, {FlopsDefinition::hardware, "hardware"},
                     {FlopsDefinition::model, "model"});

/// The software that ran a published experiment; it decides implementation details the
/// simulator must model (how pipeline activations cross nodes, what overlaps with what).
enum class Framework { megatron, deepspeed, terapipe, generic };
FORESIGHT_ENUM_NAMES(Framework, {Framework::megatron, "megatron"}, {Framework::deepspeed, "deepspeed"},
                     {Framework::terapipe, "terapipe"}, {Framework::generic, "generic"});

/// Rank order, innermost first: tp-dp-pp is Megatron-LM's (tensor ranks adjacent inside a node,
/// then data-parallel replicas, pipeline stages outermost); tp-pp-dp puts pipeline stages next.
enum class Placement { tp_dp_pp, tp_pp_dp };
FORESIGHT_ENUM_NAMES(Placement, {Placement::tp_dp_pp, "tp-dp-pp"}, {Placement::tp_pp_dp, "tp-pp-dp"});

#undef FORESIGHT_ENUM_NAMES

template <class E>
constexpr const char* to_string(E e) {
  for (const auto& [v, n] : EnumNames<E>::kList)
    if (v == e) return n;
  return "?";
}

template <class E>
std::optional<E> parse_enum(std::string_view s) {
  for (const auto& [v, n] : EnumNames<E>::kList)
    if (s == n) return v;
  return std::nullopt;
}

/// "gpipe | 1f1b | interleaved | terapipe": for error messages.
template <class E>
std::string allowed_values() {
  std::string out;
  for (const auto& [v, n] : EnumNames<E>::kList) {
    if (!out.empty()) out += " | ";
    out += n;
  }
  return out;
}

}  // namespace foresight
