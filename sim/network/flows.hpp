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
// Determinism: ids increase from 0 in start order; a component is always solved with its flows
// in id order, events at the same nanosecond are processed together, and completions are reported
// by (time, id), so nothing depends on where a flow is stored.
// Cost: a change that leaves a flow alone, or pairs it with one flow on the same links, is settled
// at once; any other change marks the links it touches, and the connected component is re-solved
// lazily, once per batch of starts or events, at the next query. So the queries that depend on
// rates (next_event_time_ns, rate_Bps, finish_time_ns) are non-const: they may re-solve first.
// Flows wait in a heap by their next event, and their bytes are settled only when their rate
// changes, so advancing time costs nothing per flow. set_fast_paths(false) sends every change
// through the component search and the general solver instead (the same rates: tested).
// Reentrancy: no globals; a FlowNetwork belongs to one simulation (one thread).
#pragma once

#include <cmath>
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
int64_t transfer_time_ns_checked(double bytes, double rate_Bps);  // the general case, with its errors
inline int64_t transfer_time_ns(double bytes, double rate_Bps) {
  if (bytes > 0 && rate_Bps > 0 && rate_Bps != kNoRateCap) {
    const double ns = std::ceil(bytes * 1e9 / rate_Bps);
    if (ns < 9.0e18) return static_cast<int64_t>(ns);
  }
  return transfer_time_ns_checked(bytes, rate_Bps);
}

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
  int64_t next_event_time_ns() {
    if (dirty_) refresh();
    return next_event_ns_;
  }
  // Moves time to t_ns (≥ now_ns()), processing every activation and completion up to and
  // including t_ns in order. Returns the flows that finished, by (time, id); the reference stays
  // valid until the next call. Finished flows are forgotten (state() says kFinished).
  const std::vector<FlowCompletion>& advance_to(int64_t t_ns) {
    if (!dirty_ && t_ns >= now_ns_ && next_event_ns_ > t_ns) {  // nothing happens on the way: O(1)
      completions_.clear();
      now_ns_ = t_ns;
      return completions_;
    }
    return advance_through_events(t_ns);
  }

  FlowState state(FlowId id) const;
  double rate_Bps(FlowId id);                // 0 while pending
  double remaining_bytes(FlowId id) const;   // at now_ns()
  int64_t finish_time_ns(FlowId id);         // predicted at current rates; kNeverNs while pending
  std::size_t flow_count() const { return live_; }  // pending + active
  int32_t link_count() const { return static_cast<int32_t>(capacity_Bps_.size()); }
  double capacity_Bps(LinkId link) const;
  // Changes a link's capacity before any flow has started (throws otherwise, or for ≤ 0).
  void set_capacity_Bps(LinkId link, double Bps);
  int last_solver_rounds() const { return solver_.last_rounds(); }
  // Settle a flow left alone or paired on its links in place, and solve single-flow and
  // shared-path components without the general solver (default on).
  void set_fast_paths(bool on) { fast_paths_ = on; }

 private:
  // Flows live in slots that are reused once a flow finishes, so a flow keeps its slot (and the
  // links keep pointing at it) for its whole life, and the slots stay as many as the most flows
  // ever in flight at once. Order never depends on slots: components are solved in id order and
  // completions are reported by (time, id).
  struct Flow {
    FlowId id = -1;                // -1: a free slot
    int64_t activate_ns = 0;
    int64_t finish_ns = kNeverNs;  // valid while active
    int64_t updated_ns = 0;        // remaining_bytes is as of this time (bytes move lazily)
    double remaining_bytes = 0;
    double rate_Bps = 0;
    double rate_cap_Bps = kNoRateCap;
    std::vector<LinkId> path;      // capacity kept when the slot is reused
    bool active = false;
    bool seen = false;             // scratch for solve_rates
    bool repeats = false;          // the path crosses some link more than once
    int32_t heap_pos = -1;         // index in events_, −1 when not in it
  };

  // A flow's next event (activation, else finish) in the events_ heap.
  struct EventEntry {
    int64_t time_ns;
    int32_t slot;
    bool operator<(const EventEntry& o) const { return time_ns != o.time_ns ? time_ns < o.time_ns : slot < o.slot; }
  };

  const std::vector<FlowCompletion>& advance_through_events(int64_t t_ns);
  int32_t slot_of(FlowId id, const char* what) const;  // throws for a finished or unknown flow
  void refresh();                          // re-solve and re-predict if the active set changed
  void solve_rates();
  double remaining_at(const Flow& f, int64_t t_ns) const;  // bytes left at t_ns at the current rate
  void settle(Flow& f);                    // brings remaining_bytes to now_ns_ (before a rate change)
  void process_events_at(int64_t t_ns);    // activations and completions at t_ns
  void on_activate(int32_t slot);          // joins its links; marks them for re-solving
  void on_finish(int32_t slot);            // leaves its links; marks them for re-solving
  void mark_links(const Flow& f);
  void place_event(std::size_t pos, EventEntry e);
  void sift_event(std::size_t pos, EventEntry e);
  void update_event(int32_t slot);         // after the flow's event time changed (or it started)
  void remove_event(int32_t slot);
  double single_flow_rate(const Flow& f) const;  // max-min rate of a flow alone on its links
  void apply_rate(int32_t slot, double rate);
  bool join_pair(int32_t slot);            // settles a flow that joined one other on the same links
  bool leave_one_alone(const Flow& f);     // settles the flow a leaving one leaves alone
  bool same_path_component();              // the flows of solve_slots_ all cross the same links
  void shared_path_rates();                // their max-min rates into solve_rates_

  std::vector<double> capacity_Bps_;
  std::vector<Flow> slots_;
  std::vector<int32_t> free_slots_;
  // The pending and active flows by their next event, earliest first: a binary heap ordered by
  // (time, slot).
  std::vector<EventEntry> events_;
  std::size_t live_ = 0;
  std::vector<FlowCompletion> completions_;
  int64_t now_ns_ = 0;
  FlowId next_id_ = 0;
  bool dirty_ = false;                     // the active set changed since the last solve
  bool fast_paths_ = true;
  int64_t next_event_ns_ = kNeverNs;       // valid when !dirty_

  // Solver input and output, reused across solves.
  MaxMinSolver solver_;
  std::vector<int32_t> solve_offsets_;
  std::vector<LinkId> solve_links_;
  std::vector<double> solve_caps_;
  std::vector<double> solve_rates_;
  std::vector<int32_t> solve_slots_;       // solver flow -> slot
  std::vector<int32_t> shared_capped_;     // shared_path_rates() scratch
  std::vector<unsigned char> shared_frozen_;
  std::vector<double> solve_capacity_;     // capacities of the links in use, by local id
  std::vector<LinkId> local_link_;         // global link -> local id, -1 when unused
  std::vector<LinkId> solve_global_;       // local id -> global link
  std::vector<std::vector<int32_t>> on_link_;  // slots of the active flows crossing each link
  std::vector<LinkId> dirty_links_;        // links whose flow set changed since the last solve
  std::vector<unsigned char> link_dirty_;
};

}  // namespace stagecraft::sim
