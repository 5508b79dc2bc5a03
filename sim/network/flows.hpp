// FlowNetwork: the network model of the simulator. It holds the flows in flight over a set of
// links, shares link bandwidth among them by max-min fairness (max_min.hpp) and answers the two
// questions every SimGrid model answers (Casanova et al., JPDC 2014): when is your next event,
// and advance to time t. It knows nothing about GPUs, collectives or the event queue.
//
// A flow is (path, bytes, latency, optional rate cap), started at the current time t0:
//   * pending  on [t0, t0 + latency_ns): no bytes move (the fixed start-up delay α of a message);
//   * active   from t0 + latency_ns: bytes move at the flow's max-min rate r(t), recomputed
//              whenever the set of active flows changes (a flow activates or finishes);
//   * finished at the first integer nanosecond t_f with  ∫ r dt ≥ bytes.
// Between two rate changes a flow with b bytes left at time t and rate r finishes at
//     t_f = t + ⌈b · 1e9 / r⌉    (rounded up: a flow never finishes early)
// and at an intermediate event t' it has  b − r·(t' − t)/1e9  bytes left. A flow whose rate did
// not change keeps its predicted t_f, so a flow alone on its path takes exactly
//     latency_ns + ⌈bytes · 1e9 / min_l C_l⌉  nanoseconds;
// a flow whose rate changes k times ends at most k ns after the exact (real-valued) time, and
// never before it except by the floating-point error of the bytes left.
// A flow with no links and no cap (same-GPU copy) has infinite rate: it finishes when it activates.
//
// Determinism: flows are kept in id order (ids increase from 0 in start order); events at the
// same nanosecond are processed together, completions are reported by (time, id).
// Reentrancy: no globals; a FlowNetwork belongs to one simulation (one thread). Rates are
// re-solved lazily, once per batch of starts or events, so the queries that depend on rates
// (next_event_time_ns, rate_Bps, finish_time_ns) are non-const: they may re-solve first.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sim/network/max_min.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::sim {

using FlowId = int64_t;

inline constexpr int64_t kNeverNs = std::numeric_limits<int64_t>::max();

enum class FlowState { kPending, kActive, kFinished };

struct FlowCompletion {
  FlowId id = 0;
  int64_t time_ns = 0;
};

// ⌈bytes · 1e9 / rate⌉ ns, 0 for no bytes or infinite rate; throws std::overflow_error when the
// result does not fit in int64_t. Shared with the analytic collective model so both round alike.
int64_t transfer_time_ns(double bytes, double rate_Bps);

class FlowNetwork {
 public:
  explicit FlowNetwork(std::vector<double> link_capacity_Bps);
  explicit FlowNetwork(const Topology& topology);

  // Starts a flow at now_ns(): active after latency_ns, then `bytes` to move over `path`.
  // Throws std::invalid_argument for negative bytes or latency, unknown links, or cap ≤ 0.
  FlowId start_flow(std::span<const LinkId> path, int64_t bytes, int64_t latency_ns,
                    double rate_cap_Bps = kNoRateCap);

  int64_t now_ns() const { return now_ns_; }
  // Earliest time at which a flow activates or finishes, kNeverNs when no flow is left.
  int64_t next_event_time_ns();
  // Moves time to t_ns (≥ now_ns()), processing every activation and completion up to and
  // including t_ns in order. Returns the flows that finished, by (time, id); the reference stays
  // valid until the next call. Finished flows are forgotten (state() says kFinished).
  const std::vector<FlowCompletion>& advance_to(int64_t t_ns);

  FlowState state(FlowId id) const;
  double rate_Bps(FlowId id);                // 0 while pending
  double remaining_bytes(FlowId id) const;   // at now_ns()
  int64_t finish_time_ns(FlowId id);         // predicted at current rates; kNeverNs while pending
  std::size_t flow_count() const { return flows_.size(); }  // pending + active
  int32_t link_count() const { return static_cast<int32_t>(capacity_Bps_.size()); }
  double capacity_Bps(LinkId link) const;
  int last_solver_rounds() const { return solver_.last_rounds(); }

 private:
  struct Flow {
    FlowId id = 0;
    int64_t activate_ns = 0;
    int64_t finish_ns = kNeverNs;  // valid while active
    double remaining_bytes = 0;
    double rate_Bps = 0;
    double rate_cap_Bps = kNoRateCap;
    int32_t path_begin = 0;        // into paths_
    int32_t path_size = 0;
    bool active = false;
  };

  std::size_t index_of(FlowId id, const char* what) const;
  void refresh();                          // re-solve and re-predict if the active set changed
  void solve_rates();
  void move_time_to(int64_t t_ns);         // bytes flow at current rates; no events
  void process_events_at(int64_t t_ns);    // activations and completions at t_ns
  void compact();                          // drop finished flows and their paths
  void on_activate(Flow& f);               // joins its links; marks them for re-solving
  void on_finish(const Flow& f);           // leaves its links; marks them for re-solving
  void mark_links(const Flow& f);

  std::vector<double> capacity_Bps_;
  std::vector<Flow> flows_;                // by id
  std::vector<LinkId> paths_;              // paths of flows_, concatenated
  std::vector<FlowCompletion> completions_;
  int64_t now_ns_ = 0;
  FlowId next_id_ = 0;
  bool dirty_ = false;                     // the active set changed since the last solve
  int64_t next_event_ns_ = kNeverNs;       // valid when !dirty_

  // Solver input and output, reused across solves.
  MaxMinSolver solver_;
  std::vector<int32_t> solve_offsets_;
  std::vector<LinkId> solve_links_;
  std::vector<double> solve_caps_;
  std::vector<double> solve_rates_;
  std::vector<std::size_t> solve_index_;   // solver flow -> index in flows_
  std::vector<double> solve_capacity_;     // capacities of the links in use, by local id
  std::vector<LinkId> local_link_;         // global link -> local id, -1 when unused
  std::vector<LinkId> solve_global_;       // local id -> global link
  std::vector<std::vector<FlowId>> on_link_;  // active flows crossing each link
  std::vector<LinkId> dirty_links_;        // links whose flow set changed since the last solve
  std::vector<unsigned char> link_dirty_;
  std::vector<unsigned char> flow_seen_;
};

}  // namespace stagecraft::sim
