// The plan search over MPI ranks. What crosses between ranks is JSON text: each rank's share of
// evaluated plans (the fields the ranking and the reports read, doubles printed exactly), then the
// ranked plans to re-simulate, then their SimGrid predictions.
#include <mpi.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli/plan_mpi.hpp"
#include "core/json_reader.hpp"
#include "core/spec_fields.hpp"
#include "core/spec_json.hpp"

namespace foresight::cli {

namespace {

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(call) + " failed with MPI error " + std::to_string(rc));
}

/// True when a launcher (Open MPI's mpirun, or a PMI/PMIx one such as srun) started this process.
bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

nlohmann::ordered_json prediction_json(const sim::Prediction& p) {
  const sim::TimeBreakdown& b = p.breakdown;
  nlohmann::ordered_json band = nullptr;
  if (p.band) {
    band = {{"cases", p.band->cases}, {"lo", p.band->lo}, {"hi", p.band->hi}};
    if (p.band->framework) band["framework"] = to_string(*p.band->framework);
    if (p.band->compute_capability) band["cc"] = *p.band->compute_capability;
  }
  nlohmann::ordered_json j = {{"iteration", p.iteration.value()}, {"tokens", p.tokens_per_s},   {"tflops", p.tflops_per_gpu},
          {"hw_tflops", p.hw_tflops_per_gpu}, {"mfu", p.mfu},              {"hfu", p.hfu},
          {"engine", to_string(p.engine)},     {"critical", p.critical_stage},
          {"breakdown", {b.compute.value(), b.recompute.value(), b.host.value(), b.tp_comm.value(), b.ep_comm.value(), b.cp_comm.value(),
                         b.pp_comm_exposed.value(), b.dp_comm_exposed.value(), b.optimizer.value(),
                         b.offload_stall.value(), b.bubble.value()}}};
  j["band"] = band;
  return j;
}

sim::Prediction prediction_from(const nlohmann::json& j) {
  sim::Prediction p;
  p.iteration = Seconds(j.at("iteration").get<double>());
  p.tokens_per_s = j.at("tokens");
  p.tflops_per_gpu = j.at("tflops");
  p.hw_tflops_per_gpu = j.at("hw_tflops");
  p.mfu = j.at("mfu");
  p.hfu = j.at("hfu");
  p.engine = *parse_enum<sim::EngineKind>(j.at("engine").get<std::string>());
  p.critical_stage = j.at("critical");
  const auto& b = j.at("breakdown");
  Seconds* parts[] = {&p.breakdown.compute, &p.breakdown.recompute, &p.breakdown.host, &p.breakdown.tp_comm,
                      &p.breakdown.ep_comm, &p.breakdown.cp_comm, &p.breakdown.pp_comm_exposed, &p.breakdown.dp_comm_exposed,
                      &p.breakdown.optimizer, &p.breakdown.offload_stall, &p.breakdown.bubble};
  for (std::size_t i = 0; i < std::size(parts); ++i) *parts[i] = Seconds(b.at(i).get<double>());
  if (j.contains("band") && !j.at("band").is_null()) {
    const auto& bj = j.at("band");
    cost_models::ErrorBand band;
    band.cases = bj.at("cases");
    band.lo = bj.at("lo");
    band.hi = bj.at("hi");
    if (bj.contains("framework")) band.framework = parse_enum<Framework>(bj.at("framework").get<std::string>());
    if (bj.contains("cc")) band.compute_capability = bj.at("cc").get<double>();
    p.band = band;
  }
  return p;
}

PlanSpec plan_from(const nlohmann::json& j) {
  PlanSpec p;
  JsonReader r(j, "<mpi>", "plan");
  JsonFieldReader fields(r);
  visit_fields(fields, p);
  return p;
}

nlohmann::ordered_json share_json(const planner::EvaluatedShare& s) {
  nlohmann::ordered_json fitting = nlohmann::ordered_json::array();
  for (const auto& c : s.fitting)
    fitting.push_back({{"plan", to_json(c.plan)}, {"analytic", prediction_json(c.analytic)}, {"memory", c.peak_memory.value()}});
  nlohmann::ordered_json j{{"fitting", fitting}, {"pruned", s.pruned_memory}};
  if (s.closest)
    j["closest"] = {{"plan", to_json(*s.closest)}, {"index", s.closest_index}, {"need", s.closest_need.value()}};
  return j;
}

planner::EvaluatedShare share_from(const nlohmann::json& j) {
  planner::EvaluatedShare s;
  for (const auto& c : j.at("fitting"))
    s.fitting.push_back(planner::Candidate{plan_from(c.at("plan")), prediction_from(c.at("analytic")), std::nullopt,
                                           Bytes(c.at("memory").get<double>())});
  s.pruned_memory = j.at("pruned");
  if (j.contains("closest")) {
    s.closest = plan_from(j["closest"].at("plan"));
    s.closest_index = j["closest"].at("index");
    s.closest_need = Bytes(j["closest"].at("need").get<double>());
  }
  return s;
}

/// Every rank's text at rank 0 (empty elsewhere).
std::vector<std::string> gather(const std::string& mine, int rank, int size) {
  const int n = int(mine.size());
  std::vector<int> sizes(size), offsets(size);
  check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::string all;
  if (rank == 0) {
    long total = 0;
    for (int i = 0; i < size; ++i) {
      offsets[i] = int(total);
      total += sizes[i];
    }
    all.resize(std::size_t(total));
  }
  check(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> out;
  if (rank == 0)
    for (int i = 0; i < size; ++i) out.push_back(all.substr(std::size_t(offsets[i]), std::size_t(sizes[i])));
  return out;
}

/// Rank 0's text on every rank.
std::string broadcast(std::string text, int rank) {
  int n = int(text.size());
  check(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (rank != 0) text.resize(std::size_t(n));
  check(MPI_Bcast(text.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return text;
}

}  // namespace

MpiWorld::MpiWorld() {
  if (!launched_by_mpirun()) return;
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    check(MPI_Init(nullptr, nullptr), "MPI_Init");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  check(MPI_Comm_size(node, &local_size_), "MPI_Comm_size");
  check(MPI_Comm_free(&node), "MPI_Comm_free");
}

planner::SearchResult distributed_search(const MpiWorld& world, const planner::SearchRequest& r,
                                         const planner::SearchProgress& progress) {
  if (world.size() == 1) return planner::search_plans(r, progress);
  const int rank = world.rank(), size = world.size();
  const std::vector<PlanSpec> plans = planner::enumerate_plans(r);
  const planner::EvaluatedShare mine = planner::evaluate_plans(r, plans, rank, size, progress);
  const std::vector<std::string> texts = gather(share_json(mine).dump(), rank, size);
  planner::SearchResult res;
  std::string ranked_text;
  if (rank == 0) {
    std::vector<planner::EvaluatedShare> shares;
    for (const auto& t : texts) shares.push_back(share_from(nlohmann::json::parse(t)));
    res = planner::rank_candidates(r, long(plans.size()), std::move(shares));
    nlohmann::ordered_json ranked = nlohmann::ordered_json::array();
    for (const auto& c : res.ranked) ranked.push_back(to_json(c.plan));
    ranked_text = ranked.dump();
  }
  // The SimGrid re-ranking of the top K, one plan in `size` per rank.
  const nlohmann::json ranked = nlohmann::json::parse(broadcast(ranked_text, rank));
  planner::SearchResult top;
  for (const auto& p : ranked) top.ranked.push_back(planner::Candidate{plan_from(p), {}, std::nullopt, Bytes(0)});
  planner::resimulate_top(r, top, rank, size, progress);
  nlohmann::ordered_json simgrid = nlohmann::ordered_json::object();
  for (std::size_t i = std::size_t(rank); i < top.ranked.size(); i += std::size_t(size))
    if (top.ranked[i].simgrid) simgrid[std::to_string(i)] = prediction_json(*top.ranked[i].simgrid);
  const std::vector<std::string> results = gather(simgrid.dump(), rank, size);
  if (rank == 0)
    for (const auto& t : results) {
      const nlohmann::json j = nlohmann::json::parse(t);  // kept alive for the loop (items() refers to it)
      for (const auto& [index, p] : j.items()) res.ranked[std::stoul(index)].simgrid = prediction_from(p);
    }
  return res;
}

}  // namespace foresight::cli
