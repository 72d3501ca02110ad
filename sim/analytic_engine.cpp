#include "sim/analytic_engine.hpp"

#include <optional>
#include <queue>

#include "core/error.hpp"

namespace foresight::sim {

Seconds StageBreakdown::busy_total() const {
  Seconds t;
  for (const auto& b : busy) t += b;
  return t;
}

void settle_stages(SimResult& r) {
  r.critical_stage = 0;
  for (auto& st : r.stages) {
    st.idle = r.iteration - st.busy_total();
    if (st.busy_total() > r.stages[r.critical_stage].busy_total()) r.critical_stage = st.stage;
  }
}

Seconds StageBreakdown::total() const {
  Seconds t = idle;
  for (const auto& b : busy) t += b;
  return t;
}

SimResult run_analytic(const Workload& w) {
  const Graph& g = w.graph;
  const std::size_t n = boost::num_vertices(g);
  SimResult r;
  r.timings.assign(n, {});
  std::vector<int> waiting(n, 0);
  std::vector<Seconds> ready(n, Seconds(0));
  for (std::size_t v = 0; v < n; ++v) waiting[v] = int(boost::in_degree(v, g));
  std::vector<Seconds> free_at(w.resources.size(), Seconds(0));

  using Item = std::pair<double, std::size_t>;  // (ready time, creation id): earliest first
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
  for (std::size_t v = 0; v < n; ++v)
    if (waiting[v] == 0) q.push({0.0, v});
  std::size_t done = 0;
  while (!q.empty()) {
    const auto [rt, v] = q.top();
    q.pop();
    const Task& t = g[v];
    Seconds start = Seconds(rt);
    for (int res : t.resources) start = max(start, free_at[res]);
    const Seconds finish = start + t.duration;
    for (int res : t.resources) free_at[res] = finish;
    r.timings[v] = {start, finish};
    r.iteration = max(r.iteration, finish);
    ++done;
    for (auto [e, end] = boost::out_edges(v, g); e != end; ++e) {
      const std::size_t u = boost::target(*e, g);
      ready[u] = max(ready[u], finish);
      if (--waiting[u] == 0) q.push({ready[u].value(), u});
    }
  }
  FORESIGHT_CHECK(done == n) << "workload graph has a cycle: scheduled " << done << " of " << n << " tasks";

  return summarize(w, std::move(r.timings));
}

SimResult summarize(const Workload& w, std::vector<TaskTiming> timings) {
  const Graph& g = w.graph;
  const std::size_t n = boost::num_vertices(g);
  SimResult r;
  r.timings = std::move(timings);
  for (const auto& t : r.timings) r.iteration = max(r.iteration, t.finish);
  // Breakdown per stage from its compute stream: busy time by category, the rest idle.
  const int p = w.shape.stages;
  r.stages.resize(p);
  for (int s = 0; s < p; ++s) r.stages[s].stage = s;
  for (std::size_t v = 0; v < n; ++v) {
    const Task& t = g[v];
    if (w.on_compute_stream(t)) r.stages[t.stage].busy[int(t.category)] += t.duration;
  }
  // Exposed data-parallel synchronisation: the gap on the compute stream between the last
  // backward and the optimizer step is counted as dp_comm, not idle.
  for (std::size_t v = 0; v < n; ++v) {
    const Task& t = g[v];
    if (t.category != Category::optimizer) continue;
    Seconds latest_compute_pred;
    Seconds latest_pred;
    for (auto [e, end] = boost::in_edges(v, g); e != end; ++e) {
      const std::size_t u = boost::source(*e, g);
      latest_pred = max(latest_pred, r.timings[u].finish);
      // (A dp_comm task on the compute stream, the overlapped buckets' slowdown, is busy time
      // already counted above.)
      if (g[u].category != Category::dp_comm || w.on_compute_stream(g[u]))
        latest_compute_pred = max(latest_compute_pred, r.timings[u].finish);
    }
    if (latest_pred > latest_compute_pred) r.stages[t.stage].busy[int(Category::dp_comm)] += latest_pred - latest_compute_pred;
  }
  // The parameter all-gather after the step (ZeRO-1/2) runs on the DP stream once the stage's
  // compute is done: the part of it after the optimizer step finished is exposed communication.
  for (std::size_t v = 0; v < n; ++v) {
    const Task& t = g[v];
    if (t.category != Category::dp_comm || t.name != "dp_param_gather") continue;
    Seconds compute_end;
    for (auto [e, end] = boost::in_edges(v, g); e != end; ++e) compute_end = max(compute_end, r.timings[boost::source(*e, g)].finish);
    if (r.timings[v].finish > compute_end) r.stages[t.stage].busy[int(Category::dp_comm)] += r.timings[v].finish - compute_end;
  }
  // Waiting for transfers: when a compute-stream task was held back by a transfer from another
  // stage (or a prefetch from host memory), the part of the wait during which that transfer was
  // running is exposed communication (an offload stall); the rest of the idle time is bubble.
  for (std::size_t v = 0; v < n; ++v) {
    const Task& t = g[v];
    if (!w.on_compute_stream(t)) continue;
    Seconds others_ready;
    std::optional<TaskTiming> transfer;
    bool from_host = false;
    for (auto [e, end] = boost::in_edges(v, g); e != end; ++e) {
      const std::size_t u = boost::source(*e, g);
      const bool remote = g[u].category == Category::pp_comm && g[u].stage != t.stage;
      // (An offload wait on the compute stream itself, windowed offload's, is busy time.)
      const bool prefetch = g[u].category == Category::offload && !w.on_compute_stream(g[u]);
      if (remote || prefetch) {
        if (!transfer || r.timings[u].finish > transfer->finish) {
          transfer = r.timings[u];
          from_host = prefetch;
        }
      } else {
        others_ready = max(others_ready, r.timings[u].finish);
      }
    }
    if (transfer && transfer->finish > others_ready) {
      // A prefetch from host memory that queued behind the offload it reads back (the same
      // micro-batch's offload_out, on the offload stream) was held up by that offload as well:
      // the stall runs from the start of the contiguous chain of offload transfers before it.
      Seconds start = transfer->start;
      if (from_host) {
        std::size_t cur = n;
        for (auto [e, end] = boost::in_edges(v, g); e != end; ++e)
          if (const std::size_t u = boost::source(*e, g); g[u].category == Category::offload && r.timings[u].finish == transfer->finish)
            cur = u;
        while (cur < n) {
          std::size_t prev = n;
          for (auto [e, end] = boost::in_edges(cur, g); e != end; ++e)
            if (const std::size_t u = boost::source(*e, g);
                g[u].category == Category::offload && r.timings[u].finish == r.timings[cur].start && r.timings[u].start < start)
              prev = u;
          if (prev < n) start = r.timings[prev].start;
          cur = prev;
        }
      }
      const Seconds wait = transfer->finish - max(others_ready, start);
      (from_host ? r.stages[t.stage].offload_wait : r.stages[t.stage].pp_wait) += wait;
    }
  }
  settle_stages(r);
  return r;
}

}  // namespace foresight::sim
