#include "sim/trace.hpp"

#include <set>

namespace foresight::sim {

nlohmann::json chrome_trace(const Workload& w, const SimResult& r) {
  nlohmann::json events = nlohmann::json::array();
  const int p = w.shape.stages;
  for (int s = 0; s < p; ++s)
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", s}, {"tid", 0},
                      {"args", {{"name", "stage " + std::to_string(s)}}}});
  for (std::size_t i = 0; i < w.resources.size(); ++i) {
    const Resource& res = w.resources[i];
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", res.stage}, {"tid", int(i)},
                      {"args", {{"name", res.name}}}});
  }
  const Graph& g = w.graph;
  // A task holding no resource (a pipeline send between stages that are not neighbours: an
  // interleaved schedule's wrap-around) shows on a row of its stage's own, numbered past the
  // resources (thread ids are unique across stages, as the resources' are), not on resource 0.
  const int unlinked = int(w.resources.size());
  std::set<int> unlinked_rows;
  for (std::size_t v = 0; v < boost::num_vertices(g); ++v) {
    const Task& t = g[v];
    if (t.duration <= Seconds(1e-9)) continue;
    // A task shows on its first resource (the compute stream for blocking sends).
    const int tid = t.resources.empty() ? unlinked + t.stage : t.resources.front();
    const int pid = t.resources.empty() ? t.stage : w.resources[tid].stage;
    if (t.resources.empty()) unlinked_rows.insert(t.stage);
    events.push_back({{"name", t.name},
                      {"cat", to_string(t.category)},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", in_us(r.timings[v].start)},
                      {"dur", in_us(t.duration)},
                      {"args", {{"microbatch", t.microbatch}, {"chunk", t.chunk}, {"slice", t.slice}}}});
  }
  for (int s : unlinked_rows)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", s}, {"tid", unlinked + s},
                      {"args", {{"name", "stage" + std::to_string(s) + ".wrap_transfers"}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace foresight::sim
