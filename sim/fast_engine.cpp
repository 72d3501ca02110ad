#include "sim/fast_engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"

namespace foresight::sim {

bool fast_engine_applies(const WorkloadCosts& c) {
  for (const auto& stage : c.chunk)
    for (const auto& chunk : stage)
      for (const auto& cc : chunk)
        if (cc.offload_out > Seconds(0) || cc.offload_in > Seconds(0)) return false;
  return true;
}

namespace {

struct OpState {
  double ready_after_chain = 0;  // when the op's first piece may start (set once computed)
  double done = -1;              // when its compute pieces finish
  double send_done = -1;         // when its outgoing transfer finishes (== done without one)
  double send_start = -1;        // when that transfer started
};

}  // namespace

SimResult run_fast(const WorkloadCosts& c) {
  FORESIGHT_CHECK(fast_engine_applies(c)) << "run_fast needs a workload without activation offload";
  const ScheduleShape& sh = c.shape;
  const int p = sh.stages, v = sh.virtual_stages, m = sh.microbatches, S = sh.slices;
  const int segments = sh.segments();
  // Scratch reused across calls (the planner evaluates thousands of plans; fresh allocations of
  // this size would be mapped and faulted in anew every time).
  thread_local std::vector<std::vector<ScheduledOp>> order;
  thread_local std::vector<std::vector<int>> pos;
  thread_local std::vector<std::vector<OpState>> st;
  order.resize(p);
  pos.resize(p);
  st.resize(p);
  for (int s = 0; s < p; ++s) order[s] = stage_schedule(sh, s);
  // position[pass][mb][chunk][slice] on its stage, flattened.
  auto key = [&](Pass pass, int mb, int chunk, int slice) {
    return ((int(pass) * m + mb) * v + chunk) * S + slice;  // pass < kPasses
  };
  for (int s = 0; s < p; ++s) {
    pos[s].assign(std::size_t(kPasses) * m * v * S, -1);
    for (int i = 0; i < int(order[s].size()); ++i) {
      const auto& o = order[s][i];
      pos[s][key(o.pass, o.microbatch, o.chunk, o.slice)] = i;
    }
    st[s].assign(order[s].size(), OpState{});
  }

  SimResult r;
  r.stages.resize(p);
  for (int s = 0; s < p; ++s) r.stages[s].stage = s;
  auto add = [&](int s, Category cat, double d) {
    if (d > 0) r.stages[s].busy[int(cat)] += Seconds(d);
  };

  // Process ops in waves: each stage advances while its next op's producer has been computed.
  std::vector<int> next(p, 0);
  std::vector<double> stream(p, 0.0);
  // Non-blocking sends (WorkloadCosts::p2p_blocks_sender false) queue on the link between
  // neighbouring stages, one per direction (build_workload's link resources; all its users send
  // from one stage, in that stage's stream order, which is the graph engine's ready-time order).
  std::vector<double> link_free(std::size_t(2 * std::max(1, p)), 0.0);
  // Per stage and model chunk: when the chunk's last backward started and ended (an overlapped DP
  // sync's buckets may begin with the first and the last bucket follows the second).
  thread_local std::vector<std::vector<double>> chunk_bwd_start, chunk_bwd_end;
  chunk_bwd_start.assign(p, std::vector<double>(v, -1.0));
  chunk_bwd_end.assign(p, std::vector<double>(v, 0.0));
  int remaining = 0;
  for (int s = 0; s < p; ++s) remaining += int(order[s].size());
  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < int(order[s].size())) {
        const ScheduledOp& o = order[s][next[s]];
        const int g = sh.segment(s, o.chunk);
        // The producer: previous segment's forward, or next segment's backward, on its stage (a
        // deferred weight pass has none: its backward ran earlier on this stream).
        double dep = 0, dep_start = 0;  // when the producer's transfer ends and began
        bool ready = true;
        bool remote = false;
        const int src_g = o.pass == Pass::weight ? -1 : o.pass == Pass::forward ? g - 1 : g + 1;
        if (src_g >= 0 && src_g < segments) {
          const ScheduleShape::Place at = sh.place(o.microbatch, src_g);
          const int ss = at.stage, sc = at.chunk;
          const int i = pos[ss][key(o.pass, o.microbatch, sc, o.slice)];
          if (st[ss][i].send_done < 0) ready = false;
          else {
            dep = st[ss][i].send_done;
            dep_start = st[ss][i].send_start;
            remote = ss != s;
          }
        }
        // A paired forward (DualPipe) also waits for its partner backward's input.
        if (ready && o.pass == Pass::forward && o.paired && next[s] + 1 < int(order[s].size())) {
          const ScheduledOp& b = order[s][next[s] + 1];
          const int bg = sh.segment(s, b.chunk) + 1;
          if (b.pass == Pass::backward && bg < segments) {
            const ScheduleShape::Place at = sh.place(b.microbatch, bg);
            const int i = pos[at.stage][key(Pass::backward, b.microbatch, at.chunk, b.slice)];
            if (st[at.stage][i].send_done < 0) ready = false;
            else if (st[at.stage][i].send_done > dep) {
              dep = st[at.stage][i].send_done;
              dep_start = st[at.stage][i].send_start;
              remote = at.stage != s;
            }
          }
        }
        if (!ready) break;
        if (o.pass == Pass::backward) {  // its own forward, on this stage (already computed: same chain)
          const int i = pos[s][key(Pass::forward, o.microbatch, o.chunk, o.slice)];
          dep = std::max(dep, st[s][i].done);
        }
        const ChunkCosts& cc = c.chunk[s][o.chunk][o.slice];
        const double start = std::max(stream[s], dep);
        // Exposed wait on a remote transfer: the part of the wait while that transfer ran.
        if (remote && dep > stream[s]) {
          r.stages[s].pp_wait += Seconds(dep - std::max(stream[s], dep_start));
        }
        double t = start;
        if (o.pass == Pass::forward) {
          t += cc.forward_host.value() + cc.forward_dp_comm.value() + cc.forward.value() + cc.forward_tp_comm.value() +
               cc.forward_ep_comm.value() + cc.forward_amax.value();
          add(s, Category::host, cc.forward_host.value());
          add(s, Category::dp_comm, cc.forward_dp_comm.value() + cc.forward_amax.value());
          add(s, Category::forward, cc.forward.value());
          add(s, Category::tp_comm, cc.forward_tp_comm.value());
          add(s, Category::ep_comm, cc.forward_ep_comm.value());
          t += cc.forward_cp_comm.value() + cc.forward_offload_wait.value();
          add(s, Category::cp_comm, cc.forward_cp_comm.value());
          add(s, Category::offload, cc.forward_offload_wait.value());
        } else if (o.pass == Pass::weight) {
          t += cc.weight_grad.value();
          add(s, Category::backward, cc.weight_grad.value());
        } else {
          // A split backward leaves its weight gradients to a later weight pass.
          const double own = (o.split ? cc.backward - cc.weight_grad : cc.backward).value();
          t += cc.backward_host.value() + cc.backward_dp_comm.value() + cc.recompute.value() + cc.recompute_tp_comm.value() +
               cc.recompute_ep_comm.value() + own + cc.backward_tp_comm.value() + cc.backward_ep_comm.value() +
               cc.backward_amax.value();
          add(s, Category::host, cc.backward_host.value());
          add(s, Category::dp_comm, cc.backward_dp_comm.value() + cc.backward_amax.value());
          add(s, Category::recompute, cc.recompute.value());
          add(s, Category::tp_comm, cc.recompute_tp_comm.value() + cc.backward_tp_comm.value());
          add(s, Category::backward, own);
          add(s, Category::ep_comm, cc.recompute_ep_comm.value() + cc.backward_ep_comm.value());
          t += cc.backward_cp_comm.value() + cc.backward_offload_wait.value();
          add(s, Category::cp_comm, cc.backward_cp_comm.value());
          add(s, Category::offload, cc.backward_offload_wait.value());
        }
        OpState& os = st[s][next[s]];
        os.done = t;
        if (o.pass == Pass::weight || (o.pass == Pass::backward && !o.split)) {  // the chunk's weight gradients
          chunk_bwd_start[s][o.chunk] = start;
          chunk_bwd_end[s][o.chunk] = t;
        }
        // The outgoing transfer when the consumer is another segment: on this stream when sends
        // block, else posted on the link.
        const int dst_g = o.pass == Pass::weight ? -1 : o.pass == Pass::forward ? g + 1 : g - 1;
        const int dst = dst_g >= 0 && dst_g < segments ? sh.place(o.microbatch, dst_g).stage : s;
        if (dst != s) {
          const double d = c.p2p_time(o.pass == Pass::forward, o.slice, s, dst).value();
          double begin = t;
          if (c.p2p_blocks_sender) {
            add(s, Category::pp_comm, d);
          } else if (std::abs(s - dst) == 1) {
            // Posted and left to run: the stream goes on, the consumer waits for the bytes.
            double& link = link_free[std::size_t(2 * std::min(s, dst) + (s < dst ? 0 : 1))];
            begin = std::max(begin, link);
            link = begin + d;
          }
          os.send_start = begin;
          os.send_done = begin + d;
          if (c.p2p_blocks_sender) t = os.send_done;
        } else {
          os.send_start = os.send_done = t;
        }
        stream[s] = t;
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    FORESIGHT_CHECK(progressed) << "fast engine: no stage can advance (schedule deadlock)";
  }

  // Data-parallel sync, optimizer, parameter gather (as build_workload's pass 3).
  for (int s = 0; s < p; ++s) {
    // Deferred weight-gradient GEMMs (the last stage's LM head) after the stage's last backward.
    const double deferred = c.deferred_wgrad_of(s).value();
    add(s, Category::backward, deferred);
    const double last = stream[s] + deferred;
    const double sync = s < int(c.dp_grad_sync.size()) ? c.dp_grad_sync[s].value() : 0.0;
    const double opt = s < int(c.optimizer.size()) ? c.optimizer[s].value() : 0.0;
    const double gather = s < int(c.dp_param_gather.size()) ? c.dp_param_gather[s].value() : 0.0;
    // Exposed: what the optimizer waits for after the last compute. Overlapped, the buckets run
    // from the start of the last backward (with model chunks, each chunk's from the start of its
    // own last backward) and only the last one must follow its end.
    double exposed = sync;
    if (c.dp_overlap && sync > 0) {
      const double tail = c.dp_overlap_tail(s).value();
      // The backward, stretched by the overlapped buckets' SM contention, and the buckets both end
      // before the tail.
      const double stretched = last + c.dp_overlap_slowdown_of(s).value();
      // The parts that queue on the DP stream, in the order their backwards ran: with model chunks
      // each chunk's share from its own last backward; otherwise the whole sync from the stage's
      // last backward (the chunk whose last backward started latest).
      const std::vector<double>& shares = c.dp_chunk_shares_of(s);
      const bool per_chunk = int(shares.size()) == v && v > 1;
      std::vector<int> chunks;
      if (per_chunk) {
        for (int k = 0; k < v; ++k) {
          chunks.push_back(k);
          FORESIGHT_CHECK(chunk_bwd_start[s][k] >= 0) << "stage " << s << " chunk " << k << " has no backward";
        }
        std::sort(chunks.begin(), chunks.end(),
                  [&](int a, int b) { return chunk_bwd_start[s][a] < chunk_bwd_start[s][b]; });
      } else {
        chunks.push_back(int(std::max_element(chunk_bwd_start[s].begin(), chunk_bwd_start[s].end()) -
                             chunk_bwd_start[s].begin()));
      }
      // A part's buckets start with its backward (or when the previous part's are done) and its
      // last bucket waits for that backward's end; the final part's end is the stretched one.
      double free = 0;
      for (std::size_t k = 0; k < chunks.size(); ++k) {
        const int ch = chunks[k];
        const double part = per_chunk ? sync * shares[ch] : sync;
        const double own_tail = std::min(tail, part);
        const double backward_end = k + 1 == chunks.size() ? stretched : chunk_bwd_end[s][ch];
        const double begin = std::max(free, chunk_bwd_start[s][ch]);
        free = std::max(begin + (part - own_tail), backward_end) + own_tail;
      }
      exposed = free - last;
    }
    add(s, Category::dp_comm, exposed);
    add(s, Category::optimizer, opt);
    // The parameter gather follows the step on the stage's DP stream and ends its iteration:
    // exposed communication, not idle time.
    add(s, Category::dp_comm, gather);
    const double end_compute = last + exposed + opt;
    r.iteration = max(r.iteration, Seconds(end_compute + gather));
  }
  settle_stages(r);
  return r;
}

}  // namespace foresight::sim
