#include "sim/workload.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"

namespace foresight::sim {

const char* to_string(Category c) {
  switch (c) {
    case Category::forward: return "forward";
    case Category::backward: return "backward";
    case Category::recompute: return "recompute";
    case Category::tp_comm: return "tp_comm";
    case Category::ep_comm: return "ep_comm";
    case Category::cp_comm: return "cp_comm";
    case Category::pp_comm: return "pp_comm";
    case Category::dp_comm: return "dp_comm";
    case Category::optimizer: return "optimizer";
    case Category::offload: return "offload";
    case Category::host: return "host";
  }
  return "?";
}

namespace {

bool computes_weight_grads(const ScheduledOp& op) {
  return op.pass == Pass::weight || (op.pass == Pass::backward && !op.split);
}

class Builder {
 public:
  explicit Builder(const WorkloadCosts& c) : c_(c) {
    w_.shape = c.shape;
    const int p = c.shape.stages;
    FORESIGHT_CHECK(int(c.chunk.size()) == p) << "costs for " << c.chunk.size() << " stages, expected " << p;
    for (int s = 0; s < p; ++s) w_.resources.push_back({ResourceKind::compute, s, "stage" + std::to_string(s) + ".compute"});
    for (int s = 0; s < p; ++s) w_.resources.push_back({ResourceKind::dp_comm, s, "stage" + std::to_string(s) + ".dp"});
    for (int s = 0; s < p; ++s) w_.resources.push_back({ResourceKind::offload, s, "stage" + std::to_string(s) + ".offload"});
    for (int s = 0; s + 1 < p; ++s) {
      w_.resources.push_back({ResourceKind::link_forward, s, "link" + std::to_string(s) + "->" + std::to_string(s + 1)});
      w_.resources.push_back({ResourceKind::link_backward, s, "link" + std::to_string(s + 1) + "->" + std::to_string(s)});
    }
  }

  Workload build() {
    const ScheduleShape& sh = c_.shape;
    const int p = sh.stages, v = sh.virtual_stages;
    const int segments = sh.segments();
    std::vector<std::vector<ScheduledOp>> orders(p);
    for (int s = 0; s < p; ++s) orders[s] = stage_schedule(sh, s);

    // Pass 1: the compute tasks of every op, chained per stage in schedule order.
    for (int s = 0; s < p; ++s)
      for (const auto& op : orders[s]) add_op(s, op);

    // Pass 2: cross-stage dependencies: the producer's transfer task precedes the consumer.
    for (int s = 0; s < p; ++s) {
      for (std::size_t i = 0; i < orders[s].size(); ++i) {
        const ScheduledOp& op = orders[s][i];
        const int g = sh.segment(s, op.chunk);
        // A paired forward starts with its partner backward, once both inputs are in (DualPipe's
        // _forward_backward_chunk receives both before computing either).
        if (op.pass == Pass::forward && op.paired && i + 1 < orders[s].size()) {
          const ScheduledOp& b = orders[s][i + 1];
          const int bg = sh.segment(s, b.chunk);
          if (b.pass == Pass::backward && bg + 1 < segments)
            edge(lookup(send_, std::make_tuple(Pass::backward, b.microbatch, bg + 1, b.slice)),
                 lookup(seg_first_, std::make_tuple(op.pass, op.microbatch, g, op.slice)));
        }
        const auto key = std::make_tuple(op.pass, op.microbatch, g, op.slice);
        // A deferred weight pass follows its own backward (on this stage's stream already).
        if (op.pass == Pass::weight)
          edge(lookup(seg_last_, std::make_tuple(Pass::backward, op.microbatch, g, op.slice)), lookup(seg_first_, key));
        if (op.pass == Pass::forward && g > 0)
          edge(lookup(send_, std::make_tuple(Pass::forward, op.microbatch, g - 1, op.slice)), lookup(seg_first_, key));
        if (op.pass == Pass::backward) {
          if (g + 1 < segments)
            edge(lookup(send_, std::make_tuple(Pass::backward, op.microbatch, g + 1, op.slice)), lookup(seg_first_, key));
          // The backward of a segment needs its own forward (stashed activations).
          edge(lookup(seg_last_, std::make_tuple(Pass::forward, op.microbatch, g, op.slice)), lookup(seg_first_, key));
        }
      }
    }

    // Pass 3: data-parallel gradient synchronisation and the optimizer step per stage.
    for (int s = 0; s < p; ++s) {
      const Seconds sync = at(c_.dp_grad_sync, s);
      TaskId after_backward = last_on_compute_[s];
      if (c_.deferred_wgrad_of(s) > Seconds(0)) {
        // Deferred weight-gradient GEMMs (the last stage's LM head) after the stage's last backward.
        Task t = base(Category::backward, s, "deferred_embedding_wgrad");
        t.duration = c_.deferred_wgrad_of(s);
        t.resources = {s};
        const TaskId d = add(t);
        edge(after_backward, d);
        after_backward = d;
      }
      TaskId sync_task = after_backward;
      const Bytes sync_bytes = s < int(c_.dp_grad_sync_bytes.size()) ? c_.dp_grad_sync_bytes[s] : Bytes(0);
      Seconds tail = sync;
      // Overlapped, the buckets run as parts queued on the DP resource, in the order their
      // backwards run: with model chunks (interleaved schedule) each chunk's share from its own
      // last backward; otherwise the whole sync from the stage's last backward, when more than its
      // last bucket is left to hide. A part's buckets but the last start with that backward (after
      // its predecessors) or when the previous part is done; the last bucket follows the
      // backward's end, the final part's the stretched one.
      const std::vector<double>& shares = c_.dp_chunk_shares_of(s);
      const bool per_chunk = c_.dp_overlap && sync > Seconds(0) && v > 1 && int(shares.size()) == v;
      // Each chunk's last op that computes weight gradients, in the stage's order: a backward
      // (unless split) or a deferred weight pass.
      std::vector<int> last_index(v, -1);
      for (int i = 0; i < int(orders[s].size()); ++i)
        if (computes_weight_grads(orders[s][i])) last_index[orders[s][i].chunk] = i;
      std::vector<int> chunks;
      if (per_chunk) {
        for (int ch = 0; ch < v; ++ch) {
          FORESIGHT_CHECK(last_index[ch] >= 0) << "stage " << s << " chunk " << ch << " has no backward";
          chunks.push_back(ch);
        }
        std::sort(chunks.begin(), chunks.end(), [&](int a, int b) { return last_index[a] < last_index[b]; });
        tail = c_.dp_overlap_tail(s);
      } else if (c_.dp_overlap && sync > Seconds(0)) {
        const int last = int(std::max_element(last_index.begin(), last_index.end()) - last_index.begin());
        if (last_index[last] >= 0 && sync > c_.dp_overlap_tail(s)) {
          chunks.push_back(last);
          tail = c_.dp_overlap_tail(s);
        }
      }
      // A part of the sync on the DP resource: its bytes in proportion to its time.
      auto dp_part = [&](const char* name, Seconds duration, Seconds latency) {
        Task t = base(Category::dp_comm, s, name);
        t.duration = duration;
        t.bytes = sync_bytes * (duration / sync);
        t.latency = latency;
        t.resources = {p + s};
        return add(t);
      };
      // The last backward's slowdown from the overlapped buckets' SM contention, on the compute
      // stream before the tail.
      std::optional<TaskId> contention;
      if (!chunks.empty() && c_.dp_overlap_slowdown_of(s) > Seconds(0)) {
        Task t = base(Category::dp_comm, s, "dp_overlap_contention");
        t.duration = c_.dp_overlap_slowdown_of(s);
        t.resources = {s};
        contention = add(t);
        edge(after_backward, *contention);
      }
      std::optional<TaskId> previous;
      for (std::size_t k = 0; k < chunks.size(); ++k) {
        const int ch = chunks[k];
        const ScheduledOp& op = orders[s][std::size_t(last_index[ch])];
        const auto key = std::make_tuple(op.pass, op.microbatch, sh.segment(s, ch), op.slice);
        const Seconds part = per_chunk ? sync * shares[std::size_t(ch)] : sync;
        const Seconds own_tail = min(tail, part);
        const bool final = k + 1 == chunks.size();
        const TaskId oid = dp_part("dp_grad_sync_overlapped", part - own_tail, c_.dp_latency);
        for (TaskId u : preds_of(lookup(seg_first_, key))) edge(u, oid);
        if (previous) edge(*previous, oid);
        // One latency term per part (carried by its first piece; the final tail carries one more,
        // as the whole sync's last bucket is a collective of its own).
        const TaskId tid = dp_part(final ? "dp_grad_sync" : "dp_grad_sync_chunk_tail", own_tail,
                                   final ? c_.dp_latency : Seconds(0));
        edge(oid, tid);
        if (final) {
          edge(after_backward, tid);
          if (contention) edge(*contention, tid);
        } else {
          edge(lookup(seg_last_, key), tid);
        }
        previous = tid;
      }
      if (previous) {
        sync_task = *previous;
      } else if (sync > Seconds(0)) {
        sync_task = dp_part("dp_grad_sync", tail, c_.dp_latency);
        edge(after_backward, sync_task);
      }
      Task opt = base(Category::optimizer, s, "optimizer_step");
      opt.duration = at(c_.optimizer, s);
      opt.resources = {s};
      TaskId opt_id = add(opt);
      edge(sync_task, opt_id);
      if (after_backward != sync_task) edge(after_backward, opt_id);
      if (contention) edge(*contention, opt_id);
      const Seconds gather = at(c_.dp_param_gather, s);
      if (gather > Seconds(0)) {
        Task g = base(Category::dp_comm, s, "dp_param_gather");
        g.duration = gather;
        g.bytes = s < int(c_.dp_param_gather_bytes.size()) ? c_.dp_param_gather_bytes[s] : Bytes(0);
        g.latency = c_.dp_latency;
        g.resources = {p + s};
        edge(opt_id, add(g));
      }
    }
    return std::move(w_);
  }

 private:
  static Seconds at(const std::vector<Seconds>& v, int i) { return i < int(v.size()) ? v[i] : Seconds(0); }

  Task base(Category cat, int stage, std::string name) {
    Task t;
    t.category = cat;
    t.stage = stage;
    t.name = std::move(name);
    return t;
  }

  TaskId add(const Task& t) { return boost::add_vertex(t, w_.graph); }
  void edge(TaskId a, TaskId b) {
    if (a != b && !boost::edge(a, b, w_.graph).second) boost::add_edge(a, b, w_.graph);
  }

  /// Appends a task to stage s's compute stream, after the previous one.
  TaskId append_compute(Task t, int s) {
    t.resources.insert(t.resources.begin(), s);
    const TaskId id = add(t);
    if (auto it = last_on_compute_.find(s); it != last_on_compute_.end()) edge(it->second, id);
    last_on_compute_[s] = id;
    return id;
  }

  void add_op(int s, const ScheduledOp& op) {
    const ChunkCosts& cc = c_.chunk.at(s).at(op.chunk).at(op.slice);
    const int g = c_.shape.segment(s, op.chunk);
    const auto key = std::make_tuple(op.pass, op.microbatch, g, op.slice);
    auto piece = [&](Category cat, Seconds d, const char* what) -> std::optional<TaskId> {
      if (d <= Seconds(0)) return std::nullopt;
      Task t = base(cat, s, std::string(what) + " mb" + std::to_string(op.microbatch) + " c" +
                                std::to_string(op.chunk) + (c_.shape.slices > 1 ? " s" + std::to_string(op.slice) : ""));
      t.pass = op.pass;
      t.chunk = op.chunk;
      t.microbatch = op.microbatch;
      t.slice = op.slice;
      t.duration = d;
      return append_compute(t, s);
    };
    std::vector<std::optional<TaskId>> ids;
    if (op.pass == Pass::forward) {
      ids.push_back(piece(Category::host, cc.forward_host, "fwd_host"));
      ids.push_back(piece(Category::dp_comm, cc.forward_dp_comm, "fwd_zero3_gather"));
      ids.push_back(piece(Category::forward, cc.forward, "fwd"));
      ids.push_back(piece(Category::tp_comm, cc.forward_tp_comm, "fwd_tp"));
      ids.push_back(piece(Category::ep_comm, cc.forward_ep_comm, "fwd_ep"));
      ids.push_back(piece(Category::cp_comm, cc.forward_cp_comm, "fwd_cp"));
      ids.push_back(piece(Category::offload, cc.forward_offload_wait, "fwd_offload_wait"));
      ids.push_back(piece(Category::dp_comm, cc.forward_amax, "fwd_fp8_amax"));
    } else if (op.pass == Pass::weight) {
      ids.push_back(piece(Category::backward, cc.weight_grad, "wgrad"));
    } else {
      ids.push_back(piece(Category::host, cc.backward_host, "bwd_host"));
      ids.push_back(piece(Category::dp_comm, cc.backward_dp_comm, "bwd_zero3_gather_reduce"));
      ids.push_back(piece(Category::recompute, cc.recompute, "recompute"));
      ids.push_back(piece(Category::tp_comm, cc.recompute_tp_comm, "recompute_tp"));
      ids.push_back(piece(Category::ep_comm, cc.recompute_ep_comm, "recompute_ep"));
      ids.push_back(piece(Category::backward, op.split ? cc.backward - cc.weight_grad : cc.backward, "bwd"));
      ids.push_back(piece(Category::tp_comm, cc.backward_tp_comm, "bwd_tp"));
      ids.push_back(piece(Category::ep_comm, cc.backward_ep_comm, "bwd_ep"));
      ids.push_back(piece(Category::cp_comm, cc.backward_cp_comm, "bwd_cp"));
      ids.push_back(piece(Category::offload, cc.backward_offload_wait, "bwd_offload_wait"));
      ids.push_back(piece(Category::dp_comm, cc.backward_amax, "bwd_fp8_amax"));
    }
    std::optional<TaskId> first, last;
    for (auto& i : ids)
      if (i) {
        if (!first) first = i;
        last = i;
      }
    if (!first) {  // a zero-cost op still needs a node to hang dependencies on
      first = last = piece(op.pass == Pass::forward ? Category::forward : Category::backward, Seconds(1e-12), "empty");
    }
    seg_first_[key] = *first;
    seg_last_[key] = *last;
    add_send(s, op, key, *last);
    // Offloaded activations: copied out after the forward, prefetched before the backward, on a
    // side stream; the backward waits for its prefetch.
    const int off_res = 2 * c_.shape.stages + s;
    if (op.pass == Pass::forward && cc.offload_out > Seconds(0)) {
      Task t = base(Category::offload, s, "offload_out mb" + std::to_string(op.microbatch));
      t.duration = cc.offload_out;
      t.resources = {off_res};
      const TaskId id = add(t);
      edge(*last, id);
      offload_out_[key] = id;
    }
    if (op.pass == Pass::backward && cc.offload_in > Seconds(0)) {
      Task t = base(Category::offload, s, "offload_in mb" + std::to_string(op.microbatch));
      t.duration = cc.offload_in;
      t.resources = {off_res};
      const TaskId id = add(t);
      const auto fkey = std::make_tuple(Pass::forward, op.microbatch, g, op.slice);
      if (auto it = offload_out_.find(fkey); it != offload_out_.end()) edge(it->second, id);
      edge(id, *first);
    }
  }

  using Key = std::tuple<Pass, int, int, int>;
  static TaskId lookup(const std::map<Key, TaskId>& m, const Key& k) {
    auto it = m.find(k);
    FORESIGHT_CHECK(it != m.end()) << "no task for pass " << int(std::get<0>(k)) << " mb " << std::get<1>(k)
                                   << " segment " << std::get<2>(k) << " slice " << std::get<3>(k);
    return it->second;
  }

  /// The transfer of a segment's output to the stage holding the next (forward) or previous
  /// (backward) segment: on the link between them and, when sends block, on the sender's stream.
  void add_send(int src, const ScheduledOp& op, const Key& key, TaskId after) {
    if (op.pass == Pass::weight) return;  // nothing leaves the stage
    const int p = c_.shape.stages, segments = c_.shape.segments();
    const int g = c_.shape.segment(src, op.chunk);
    const bool forward = op.pass == Pass::forward;
    const int target = forward ? g + 1 : g - 1;
    if (target < 0 || target >= segments) return;
    const int dst = c_.shape.place(op.microbatch, target).stage;
    if (dst == src) {  // consecutive segments on one stage (p == 1): no transfer
      send_[key] = after;
      return;
    }
    Task t = base(Category::pp_comm, src, std::string(forward ? "send_fwd" : "send_bwd") + " mb" +
                                              std::to_string(op.microbatch) + " c" + std::to_string(op.chunk));
    t.pass = op.pass;
    t.microbatch = op.microbatch;
    t.chunk = op.chunk;
    t.slice = op.slice;
    t.duration = c_.p2p_time(forward, op.slice, src, dst);
    t.tail = at(forward ? c_.p2p_forward_tail : c_.p2p_backward_tail, op.slice);
    const auto& bytes = forward ? c_.p2p_forward_bytes : c_.p2p_backward_bytes;
    t.bytes = op.slice < int(bytes.size()) ? bytes[op.slice] : Bytes(0);
    t.src_stage = src;
    t.dst_stage = dst;
    // The link between neighbouring stages, in the direction the bytes travel (an interleaved
    // schedule's forward wrap from stage 1 to stage 0 at p = 2 shares the 1 -> 0 direction with
    // the backward sends, not the 0 -> 1 one its pass would suggest).
    const int lo = std::min(src, dst);
    if (std::abs(src - dst) == 1) t.resources = {3 * p + 2 * lo + (src < dst ? 0 : 1)};
    TaskId id;
    if (c_.p2p_blocks_sender) {
      id = append_compute(t, src);
    } else {
      id = add(t);
      edge(after, id);
    }
    send_[key] = id;
  }

  const WorkloadCosts& c_;
  Workload w_;
  std::vector<TaskId> preds_of(TaskId v) const {
    std::vector<TaskId> preds;
    for (auto [e, end] = boost::in_edges(v, w_.graph); e != end; ++e) preds.push_back(boost::source(*e, w_.graph));
    return preds;
  }
  std::map<int, TaskId> last_on_compute_;
  std::map<Key, TaskId> seg_first_, seg_last_, offload_out_, send_;
};

}  // namespace

Workload build_workload(const WorkloadCosts& costs) { return Builder(costs).build(); }

}  // namespace foresight::sim
