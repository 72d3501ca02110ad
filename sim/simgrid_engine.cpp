#include "sim/simgrid_engine.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "foresight/config.hpp"

#if FORESIGHT_HAVE_SIMGRID
#include <simgrid/s4u.hpp>
#include <xbt/log.h>
namespace sg4 = simgrid::s4u;
#endif

namespace foresight::sim {

bool simgrid_available() { return config::kHaveSimgrid; }

#if FORESIGHT_HAVE_SIMGRID
namespace {

constexpr double kHostSpeed = 1e9;  // flop/s of a simulated host: delays are replayed as flops

/// What to create when a task becomes ready: a delay on a host, or a flow between two hosts.
struct Recipe {
  sg4::Host* host = nullptr;  // delay: where; flow: source
  sg4::Host* to = nullptr;    // flow: destination (nullptr for a delay)
  double amount = 0;          // delay: flops; flow: bytes
};

/// Creates and starts each SimGrid activity only once all its predecessors have completed, and
/// records its start and finish. (SimGrid 3.32 keeps every created activity in a list that each
/// completion scans linearly, so creating the whole graph up front is quadratic in its size;
/// creating activities when ready keeps that list to the few that run.)
class Launcher {
 public:
  int add(const Recipe& r) {
    recipes_.push_back(r);
    succ_.emplace_back();
    pending_.push_back(0);
    return int(recipes_.size()) - 1;
  }
  void precede(int a, int b) {
    succ_[a].push_back(b);
    ++pending_[b];
  }
  double start_time(int i) const { return start_[i]; }
  double finish_time(int i) const { return finish_[i]; }

  void run(sg4::Engine& e) {
    start_.assign(recipes_.size(), -1.0);
    finish_.assign(recipes_.size(), -1.0);
    sg4::Activity::on_completion_cb([this](const sg4::Activity& a) {
      auto it = running_.find(&a);
      if (it == running_.end()) return;
      const int i = it->second.index;
      start_[i] = a.get_start_time();
      finish_[i] = a.get_finish_time();
      // SimGrid still uses the activity after this callback: keep it alive until the run ends.
      finished_.push_back(std::move(it->second.keep));
      running_.erase(it);
      for (int s : succ_[i])
        if (--pending_[s] == 0) launch(s);
    });
    for (std::size_t i = 0; i < recipes_.size(); ++i)
      if (pending_[i] == 0) launch(int(i));
    e.run();
    for (std::size_t i = 0; i < recipes_.size(); ++i)
      FORESIGHT_CHECK(finish_[i] >= 0) << "activity " << i << " never ran";
  }

 private:
  struct Live {
    int index;
    sg4::ActivityPtr keep;  // holds the activity until it completes
  };
  void launch(int i) {
    const Recipe& r = recipes_[i];
    if (r.to == nullptr) {
      sg4::ExecPtr x = sg4::Exec::init()->set_host(r.host)->set_flops_amount(r.amount);
      running_[x.get()] = Live{i, x};
      x->start();
    } else {
      sg4::CommPtr c = sg4::Comm::sendto_init(r.host, r.to)->set_payload_size(uint64_t(r.amount));
      running_[c.get()] = Live{i, c};
      c->start();
    }
  }
  std::vector<Recipe> recipes_;
  std::vector<std::vector<int>> succ_;
  std::vector<int> pending_;
  std::vector<double> start_, finish_;
  std::unordered_map<const sg4::Activity*, Live> running_;
  std::vector<sg4::ActivityPtr> finished_;
};

/// Which node hosts the tensor-parallel group of (replica, stage).
int node_of(const SimgridPlatform& pf, int stages, int replica, int stage) {
  const int group = pf.placement == Placement::tp_dp_pp ? replica + pf.dp * stage : stage + stages * replica;
  const long long first_gpu = (long long)group * pf.tp;
  return int(first_gpu / pf.gpus_per_node);
}

/// The zones of the platform. Without tiers: one star zone. With tiers: the groups of tier t are
/// star zones holding the groups of tier t-1 (tier 0 holds the hosts); group k of tier t spans nodes
/// [k G_t, (k+1) G_t) and reaches its parent through a split-duplex uplink of its nodes' injection
/// divided by o_0 x ... x o_t, so a flow between two pods crosses both pods' uplinks and only those.
class Fabric {
 public:
  Fabric(const SimgridPlatform& pf, int nodes) : pf_(pf) {
    root_ = sg4::create_star_zone("fabric");
    const int T = int(pf.tiers.size());
    zones_.resize(T);
    double cumulative = 1.0;
    std::vector<double> upper(T);
    for (int t = 0; t < T; ++t) upper[t] = cumulative *= pf.tiers[t].oversubscription;
    for (int t = T - 1; t >= 0; --t) {
      const int size = pf.tiers[t].nodes, groups = (nodes + size - 1) / size;
      for (int k = 0; k < groups; ++k) {
        sg4::NetZone* parent = t == T - 1 ? root_ : zones_[t + 1][k * size / pf.tiers[t + 1].nodes];
        char name[64];
        std::snprintf(name, sizeof name, "tier%d.group%d", t, k);
        sg4::NetZone* z = sg4::create_star_zone(name);
        z->set_parent(parent);
        // The gateway sits at the zone's centre: it adds no link of its own.
        std::snprintf(name, sizeof name, "tier%d.group%d.gw", t, k);
        auto* gw = z->create_router(name);
        z->add_route(gw, nullptr, nullptr, nullptr, {}, true);
        const int members = std::min(size, nodes - k * size);
        std::snprintf(name, sizeof name, "tier%d.group%d.up", t, k);
        auto* up = parent->create_split_duplex_link(name, members * pf.node_injection.value() / upper[t]);
        up->set_latency(0)->seal();
        parent->add_route(z->get_netpoint(), nullptr, gw, nullptr,
                          {sg4::LinkInRoute(up, sg4::LinkInRoute::Direction::UP)}, true);
        zones_[t].push_back(z);
      }
    }
    if (T > 0) {  // the root's children need a centre to meet at
      auto* gw = root_->create_router("fabric.gw");
      root_->add_route(gw, nullptr, nullptr, nullptr, {}, true);
    }
  }
  /// The zone that holds node n's hosts and NIC links.
  sg4::NetZone* leaf(int n) const { return zones_.empty() ? root_ : zones_[0][n / pf_.tiers[0].nodes]; }
  void seal() {
    for (auto& level : zones_)
      for (sg4::NetZone* z : level) z->seal();
    root_->seal();
  }

 private:
  const SimgridPlatform& pf_;
  sg4::NetZone* root_ = nullptr;
  std::vector<std::vector<sg4::NetZone*>> zones_;  // [tier][group]
};

/// Runs in the child: builds the platform and the activities, runs, returns replica 0's timings.
std::vector<TaskTiming> replay(const Workload& w, const SimgridPlatform& pf) {
  xbt_log_control_set("root.thresh:critical");
  sg4::Engine e("foresight-simgrid");
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/TCP-gamma:0");
  sg4::Engine::set_config("network/crosstraffic:0");

  const int p = w.shape.stages, R = pf.dp;
  int nodes = 0;
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < p; ++s) nodes = std::max(nodes, node_of(pf, p, r, s) + 1);
  // Zones: one flat star without tiers; with tiers, a star per switch group, nested innermost
  // first, each group reaching its parent through its own oversubscribed uplink.
  Fabric fabric(pf, nodes);
  std::vector<sg4::SplitDuplexLink*> nic(nodes);
  for (int n = 0; n < nodes; ++n) {
    char name[48];
    std::snprintf(name, sizeof name, "node%d.nics", n);
    nic[n] = fabric.leaf(n)->create_split_duplex_link(name, pf.node_injection.value());
    nic[n]->set_latency(pf.network_latency.value() / 2)->seal();
  }
  sg4::Link* core = nullptr;
  if (pf.oversubscription > 1.0 && pf.tiers.empty()) {
    core = fabric.leaf(0)->create_link("core", nodes * pf.node_injection.value() / pf.oversubscription);
    core->set_sharing_policy(sg4::Link::SharingPolicy::SHARED)->seal();
  }
  // Each TP group's own NICs (rails): a flow crosses them, then the node's NICs it shares with
  // the node's other groups. Only where the group owns fewer NICs than the node has.
  const bool rails = pf.group_injection > BytesPerSecond(0) && pf.group_injection < pf.node_injection;
  std::vector<std::vector<sg4::Host*>> host(R, std::vector<sg4::Host*>(p));
  std::vector<std::vector<int>> node(R, std::vector<int>(p));
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < p; ++s) {
      node[r][s] = node_of(pf, p, r, s);
      sg4::NetZone* zone = fabric.leaf(node[r][s]);
      // (snprintf, not string concatenation: g++ 12 -Wrestrict misfires on "r" + std::to_string.)
      char name[48];
      std::snprintf(name, sizeof name, "r%ds%d", r, s);
      host[r][s] = zone->create_host(name, kHostSpeed);
      host[r][s]->set_core_count(8)->seal();
      std::vector<sg4::LinkInRoute> up{sg4::LinkInRoute(nic[node[r][s]], sg4::LinkInRoute::Direction::UP)};
      if (rails) {
        std::snprintf(name, sizeof name, "r%ds%d.nics", r, s);
        auto* own = zone->create_split_duplex_link(name, pf.group_injection.value());
        own->set_latency(0)->seal();
        up.insert(up.begin(), sg4::LinkInRoute(own, sg4::LinkInRoute::Direction::UP));
      }
      if (core) up.emplace_back(core);
      zone->add_route(host[r][s]->get_netpoint(), nullptr, nullptr, nullptr, up, true);
    }
  fabric.seal();

  const Graph& g = w.graph;
  const std::size_t n = boost::num_vertices(g);
  // entry/exit activity of each task in each replica (a DP collective is several activities).
  Launcher L;
  std::vector<std::vector<int>> entry(R, std::vector<int>(n, -1));
  std::vector<std::vector<int>> exit(R, std::vector<int>(n, -1));
  auto delay = [&](sg4::Host* h, Seconds d) { return L.add(Recipe{h, nullptr, std::max(d.value(), 0.0) * kHostSpeed}); };
  auto flow = [&](sg4::Host* from, sg4::Host* to, Bytes b) { return L.add(Recipe{from, to, b.value()}); };
  for (std::size_t v = 0; v < n; ++v) {
    const Task& t = g[v];
    const int s = t.stage;
    const bool dp_flows = t.category == Category::dp_comm && R > 1 && t.bytes > Bytes(0) &&
                          node[0][s] != node[1 % R][s];
    if (dp_flows) {
      // Coarse ring: latency term per rank, then one flow per rank to its neighbour, all at once.
      const int start_barrier = delay(host[0][s], Seconds(0));
      const int end_barrier = delay(host[0][s], Seconds(0));
      for (int r = 0; r < R; ++r) {
        entry[r][v] = delay(host[r][s], t.latency);
        L.precede(entry[r][v], start_barrier);
        const int f = flow(host[r][s], host[(r + 1) % R][s], t.bytes * pf.dp_wire_factor);
        L.precede(start_barrier, f);
        L.precede(f, end_barrier);
        exit[r][v] = end_barrier;
      }
      continue;
    }
    for (int r = 0; r < R; ++r) {
      int a;
      if (t.category == Category::pp_comm && t.src_stage >= 0 && node[r][t.src_stage] != node[r][t.dst_stage]) {
        a = flow(host[r][t.src_stage], host[r][t.dst_stage], t.bytes * pf.pp_wire_factor);
        if (t.tail > Seconds(0)) {  // then the receiving node's NVLink collective
          const int b = delay(host[r][t.dst_stage], t.tail);
          L.precede(a, b);
          entry[r][v] = a;
          exit[r][v] = b;
          continue;
        }
      } else {
        a = delay(host[r][s], t.duration);
      }
      entry[r][v] = exit[r][v] = a;
    }
  }
  for (std::size_t v = 0; v < n; ++v)
    for (auto [ei, ee] = boost::out_edges(v, g); ei != ee; ++ei) {
      const std::size_t u = boost::target(*ei, g);
      for (int r = 0; r < R; ++r) L.precede(exit[r][v], entry[r][u]);
    }
  L.run(e);
  std::vector<TaskTiming> out(n);
  for (std::size_t v = 0; v < n; ++v)
    out[v] = {Seconds(L.start_time(entry[0][v])), Seconds(L.finish_time(exit[0][v]))};
  return out;
}

bool write_all(int fd, const void* buf, std::size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t k = ::write(fd, p, len);
    if (k <= 0) return false;
    p += k;
    len -= std::size_t(k);
  }
  return true;
}

bool read_all(int fd, void* buf, std::size_t len) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t k = ::read(fd, p, len);
    if (k <= 0) return false;
    p += k;
    len -= std::size_t(k);
  }
  return true;
}

}  // namespace

SimResult run_simgrid(const Workload& w, const SimgridPlatform& pf) {
  FORESIGHT_CHECK(pf.dp >= 1 && pf.tp >= 1 && pf.gpus_per_node >= 1);
  const std::size_t n = boost::num_vertices(w.graph);
  int fds[2];
  FORESIGHT_CHECK(::pipe(fds) == 0) << "pipe: " << std::strerror(errno);
  const pid_t pid = ::fork();
  FORESIGHT_CHECK(pid >= 0) << "fork: " << std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
    int status = 0;
    std::vector<double> flat;
    std::string err;
    try {
      const auto t = replay(w, pf);
      for (const auto& x : t) {
        flat.push_back(x.start.value());
        flat.push_back(x.finish.value());
      }
    } catch (const std::exception& ex) {
      status = 1;
      err = ex.what();
    }
    const std::size_t len = status == 0 ? flat.size() * sizeof(double) : err.size();
    write_all(fds[1], &status, sizeof status);
    write_all(fds[1], &len, sizeof len);
    write_all(fds[1], status == 0 ? static_cast<const void*>(flat.data()) : err.data(), len);
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  int status = -1;
  std::size_t len = 0;
  std::vector<double> flat;
  std::string err;
  bool ok = read_all(fds[0], &status, sizeof status) && read_all(fds[0], &len, sizeof len);
  if (ok && status == 0) {
    flat.resize(len / sizeof(double));
    ok = read_all(fds[0], flat.data(), len);
  } else if (ok) {
    err.resize(len);
    ok = read_all(fds[0], err.data(), len);
  }
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  FORESIGHT_CHECK(ok) << "the SimGrid child process died (wait status " << wstatus << ")";
  FORESIGHT_CHECK(status == 0) << "SimGrid replay failed: " << err;
  FORESIGHT_CHECK(flat.size() == 2 * n) << "SimGrid returned " << flat.size() / 2 << " timings for " << n << " tasks";
  std::vector<TaskTiming> timings(n);
  for (std::size_t v = 0; v < n; ++v) timings[v] = {Seconds(flat[2 * v]), Seconds(flat[2 * v + 1])};
  return summarize(w, std::move(timings));
}

#else

SimResult run_simgrid(const Workload&, const SimgridPlatform&) {
  throw SpecError(SourceLocation{"<command line>", 0, 0}, "--engine", "simgrid",
                  "this build has no SimGrid (install libsimgrid-dev and rebuild)");
}

#endif

}  // namespace foresight::sim
