#include "sim/network/flows.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stagecraft::sim {

int64_t transfer_time_ns_checked(double bytes, double rate_Bps) {
  if (!(bytes > 0) || rate_Bps == kNoRateCap) return 0;
  if (!(rate_Bps > 0)) {
    throw std::invalid_argument("transfer_time_ns: " + std::to_string(bytes) + " bytes at rate " +
                                std::to_string(rate_Bps) + " B/s never finish");
  }
  const double ns = std::ceil(bytes * 1e9 / rate_Bps);
  if (!(ns < 9.0e18)) {
    throw std::overflow_error("transfer_time_ns: " + std::to_string(bytes) + " bytes at " + std::to_string(rate_Bps) +
                              " B/s take longer than int64_t nanoseconds can hold");
  }
  return static_cast<int64_t>(ns);
}

FlowNetwork::FlowNetwork(std::vector<double> link_capacity_Bps) : capacity_Bps_(std::move(link_capacity_Bps)) {
  for (std::size_t l = 0; l < capacity_Bps_.size(); ++l) {
    if (!(capacity_Bps_[l] > 0)) {
      throw std::invalid_argument("FlowNetwork: link " + std::to_string(l) + " has capacity " +
                                  std::to_string(capacity_Bps_[l]) + " B/s; expected > 0");
    }
  }
}

FlowNetwork::FlowNetwork(const Topology& topology) : FlowNetwork(topology.capacities_Bps()) {}

double FlowNetwork::capacity_Bps(LinkId link) const {
  if (link < 0 || link >= link_count()) {
    throw std::out_of_range("FlowNetwork::capacity_Bps: link " + std::to_string(link) + " outside [0, " +
                            std::to_string(link_count()) + ")");
  }
  return capacity_Bps_[static_cast<std::size_t>(link)];
}

void FlowNetwork::set_capacity_Bps(LinkId link, double Bps) {
  capacity_Bps(link);  // range check
  if (next_id_ != 0) throw std::logic_error("FlowNetwork::set_capacity_Bps: flows have started");
  if (!(Bps > 0)) throw std::invalid_argument("FlowNetwork::set_capacity_Bps: expected > 0 B/s, got " + std::to_string(Bps));
  capacity_Bps_[static_cast<std::size_t>(link)] = Bps;
}

FlowId FlowNetwork::start_flow(std::span<const LinkId> path, int64_t bytes, int64_t latency_ns, double rate_cap_Bps) {
  auto fail = [&](const std::string& detail) {
    throw std::invalid_argument("FlowNetwork::start_flow (flow " + std::to_string(next_id_) + " at " +
                                std::to_string(now_ns_) + " ns): " + detail);
  };
  if (bytes < 0) fail("bytes must be >= 0, got " + std::to_string(bytes));
  if (latency_ns < 0 || latency_ns > kNeverNs - now_ns_) {
    fail("latency_ns must be in [0, " + std::to_string(kNeverNs - now_ns_) + "], got " + std::to_string(latency_ns));
  }
  if (!(rate_cap_Bps > 0)) fail("rate cap must be > 0 B/s, got " + std::to_string(rate_cap_Bps));
  for (LinkId l : path) {
    if (l < 0 || l >= link_count()) {
      fail("link " + std::to_string(l) + " outside [0, " + std::to_string(link_count()) + ")");
    }
  }
  int32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<int32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Flow& f = slots_[static_cast<std::size_t>(slot)];
  f.id = next_id_++;
  f.activate_ns = now_ns_ + latency_ns;
  f.finish_ns = kNeverNs;
  f.updated_ns = f.activate_ns;
  f.remaining_bytes = static_cast<double>(bytes);
  f.rate_Bps = 0;
  f.rate_cap_Bps = rate_cap_Bps;
  f.path.assign(path.begin(), path.end());
  f.repeats = false;
  for (std::size_t k = 1; k < path.size() && !f.repeats; ++k) {
    f.repeats = std::find(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(k), path[k]) != path.begin() + static_cast<std::ptrdiff_t>(k);
  }
  f.active = latency_ns == 0;
  ++live_;
  if (f.active) {
    on_activate(slot);
  } else if (!dirty_) {
    next_event_ns_ = std::min(next_event_ns_, f.activate_ns);
  }
  update_event(slot);
  return f.id;
}

// Max-min rates of the active flows; a flow whose rate changed gets a new predicted finish.
// Max-min rates decompose over connected components of the flow–link graph, so only the flows
// connected to a link whose set of flows changed are re-solved; every other flow keeps its rate
// and its predicted finish. The solver sees only the component's links, renumbered densely in
// order of first use, so a solve costs O(component flows · path), however large the cluster is.
void FlowNetwork::solve_rates() {
  solve_offsets_.assign(1, 0);
  solve_links_.clear();
  solve_caps_.clear();
  solve_slots_.clear();
  solve_capacity_.clear();
  if (local_link_.size() != capacity_Bps_.size()) local_link_.assign(capacity_Bps_.size(), -1);
  // Breadth-first over links: every active flow on a reached link joins, and so do its links.
  for (std::size_t next = 0; next < dirty_links_.size(); ++next) {
    const LinkId l = dirty_links_[next];
    for (int32_t slot : on_link_[static_cast<std::size_t>(l)]) {
      Flow& f = slots_[static_cast<std::size_t>(slot)];
      if (f.seen) continue;
      f.seen = true;
      for (LinkId m : f.path) {
        if (!link_dirty_[static_cast<std::size_t>(m)]) {
          link_dirty_[static_cast<std::size_t>(m)] = 1;
          dirty_links_.push_back(m);
        }
      }
      solve_slots_.push_back(slot);
    }
  }
  for (LinkId l : dirty_links_) link_dirty_[static_cast<std::size_t>(l)] = 0;
  dirty_links_.clear();
  if (solve_slots_.empty()) return;
  // flow-id order: deterministic labels, whatever slots the flows sit in
  std::sort(solve_slots_.begin(), solve_slots_.end(), [this](int32_t a, int32_t b) {
    return slots_[static_cast<std::size_t>(a)].id < slots_[static_cast<std::size_t>(b)].id;
  });
  solve_rates_.assign(solve_slots_.size(), 0.0);
  if (fast_paths_ && solve_slots_.size() == 1) {
    Flow& f = slots_[static_cast<std::size_t>(solve_slots_[0])];
    f.seen = false;
    solve_rates_[0] = single_flow_rate(f);
  } else if (fast_paths_ && same_path_component()) {
    shared_path_rates();
  } else {
    for (int32_t slot : solve_slots_) {
      Flow& f = slots_[static_cast<std::size_t>(slot)];
      f.seen = false;
      for (LinkId l : f.path) {
        LinkId& local = local_link_[static_cast<std::size_t>(l)];
        if (local < 0) {
          local = static_cast<LinkId>(solve_capacity_.size());
          solve_capacity_.push_back(capacity_Bps_[static_cast<std::size_t>(l)]);
          solve_global_.push_back(l);
        }
        solve_links_.push_back(local);
      }
      solve_offsets_.push_back(static_cast<int32_t>(solve_links_.size()));
      solve_caps_.push_back(f.rate_cap_Bps);
    }
    for (LinkId l : solve_global_) local_link_[static_cast<std::size_t>(l)] = -1;
    solve_global_.clear();
    solver_.solve_prevalidated({solve_capacity_, solve_offsets_, solve_links_, solve_caps_}, solve_rates_);
  }
  for (std::size_t k = 0; k < solve_slots_.size(); ++k) apply_rate(solve_slots_[k], solve_rates_[k]);
}

// A flow's new max-min rate: bytes moved so far are settled and its finish predicted again. A
// flow whose rate did not change keeps its prediction exactly.
void FlowNetwork::apply_rate(int32_t slot, double rate) {
  Flow& f = slots_[static_cast<std::size_t>(slot)];
  if (rate == f.rate_Bps && f.finish_ns != kNeverNs) return;
  settle(f);
  f.rate_Bps = rate;
  const int64_t left_ns = transfer_time_ns(f.remaining_bytes, rate);
  if (left_ns > kNeverNs - 1 - now_ns_) {
    throw std::overflow_error("FlowNetwork: flow " + std::to_string(f.id) + " would finish past the int64_t horizon");
  }
  f.finish_ns = now_ns_ + left_ns;
  update_event(slot);
}

// The two changes that dominate a simulation, settled where they happen instead of by a search
// for the component at the next refresh (the result is the one that search would give):
//  * a flow joins exactly one other flow that crosses the same links and nothing else: the pair
//    is the component (shared_path_rates);
//  * a flow leaves exactly one other flow that is then alone on all its links: that flow is the
//    component (single_flow_rate).
// Neither applies when a link involved has a change pending; those wait for the search.
bool FlowNetwork::join_pair(int32_t slot) {
  const Flow& f = slots_[static_cast<std::size_t>(slot)];
  if (f.repeats) return false;
  int32_t other = -1;
  for (LinkId l : f.path) {
    const auto li = static_cast<std::size_t>(l);
    const std::vector<int32_t>& list = on_link_[li];
    if (link_dirty_[li] || list.size() != 2) return false;
    const int32_t o = list[0] == slot ? list[1] : list[0];
    if (other >= 0 && o != other) return false;
    other = o;
  }
  const Flow& b = slots_[static_cast<std::size_t>(other)];
  if (b.path != f.path) return false;
  solve_slots_.assign({other, slot});
  if (b.id > f.id) std::swap(solve_slots_[0], solve_slots_[1]);
  solve_rates_.assign(2, 0.0);
  shared_path_rates();
  apply_rate(solve_slots_[0], solve_rates_[0]);
  apply_rate(solve_slots_[1], solve_rates_[1]);
  return true;
}

bool FlowNetwork::leave_one_alone(const Flow& f) {
  int32_t other = -1;
  for (LinkId l : f.path) {
    const auto li = static_cast<std::size_t>(l);
    const std::vector<int32_t>& list = on_link_[li];
    if (link_dirty_[li] || list.size() > 1) return false;
    if (list.empty()) continue;
    if (other >= 0 && list[0] != other) return false;
    other = list[0];
  }
  if (other < 0) return true;  // f was alone: nobody to speed up
  const Flow& b = slots_[static_cast<std::size_t>(other)];
  for (LinkId l : b.path) {
    const auto li = static_cast<std::size_t>(l);
    if (link_dirty_[li] || on_link_[li].size() != 1) return false;
  }
  apply_rate(other, single_flow_rate(b));
  return true;
}

void FlowNetwork::refresh() {
  if (!dirty_) return;
  solve_rates();
  next_event_ns_ = events_.empty() ? kNeverNs : events_.front().time_ns;
  dirty_ = false;
}

// Every flow of the component crosses the same links, each once (a collective's ring step and
// another collective, or a pipeline send, of the same rank to the same peer).
bool FlowNetwork::same_path_component() {
  const Flow& first = slots_[static_cast<std::size_t>(solve_slots_[0])];
  if (first.repeats || first.path.empty()) return false;
  for (std::size_t k = 1; k < solve_slots_.size(); ++k) {
    if (slots_[static_cast<std::size_t>(solve_slots_[k])].path != first.path) return false;
  }
  return true;
}

// MaxMinSolver on flows that share all their links: every link has the same flows, the same
// frozen sum and count, so λ_l = (C_l − frozen)/n is smallest on the narrowest link in every
// round, and freezing any link freezes them all. The rounds below are solve_small()'s on that one
// link — same order, same arithmetic, same tolerances — so the rates are bit-identical to it.
void FlowNetwork::shared_path_rates() {
  const Flow& first = slots_[static_cast<std::size_t>(solve_slots_[0])];
  double capacity = kNoRateCap;
  for (LinkId l : first.path) capacity = std::min(capacity, capacity_Bps_[static_cast<std::size_t>(l)]);
  const std::size_t n = solve_slots_.size();
  shared_capped_.clear();
  for (std::size_t f = 0; f < n; ++f) {  // (cap, flow) order
    const double cap = slots_[static_cast<std::size_t>(solve_slots_[f])].rate_cap_Bps;
    if (!(cap < kNoRateCap)) continue;
    shared_capped_.push_back(static_cast<int32_t>(f));
    for (std::size_t i = shared_capped_.size() - 1;
         i > 0 && slots_[static_cast<std::size_t>(solve_slots_[static_cast<std::size_t>(shared_capped_[i - 1])])].rate_cap_Bps > cap; --i) {
      std::swap(shared_capped_[i], shared_capped_[i - 1]);
    }
  }
  shared_frozen_.assign(n, 0);
  auto cap_of = [&](std::size_t f) { return slots_[static_cast<std::size_t>(solve_slots_[f])].rate_cap_Bps; };
  int64_t unfrozen = static_cast<int64_t>(n);
  double frozen_sum = 0;
  double key = capacity / static_cast<double>(unfrozen);
  bool in_heap = true;
  std::size_t next_capped = 0;
  double level = 0;
  while (unfrozen > 0) {
    while (next_capped < shared_capped_.size() && shared_frozen_[static_cast<std::size_t>(shared_capped_[next_capped])]) ++next_capped;
    const double cap_level = next_capped < shared_capped_.size() ? cap_of(static_cast<std::size_t>(shared_capped_[next_capped])) : kNoRateCap;
    const double link_level = in_heap ? key : kNoRateCap;
    level = std::max(level, std::min(link_level, cap_level));
    bool touched = false;
    for (; next_capped < shared_capped_.size(); ++next_capped) {
      const auto f = static_cast<std::size_t>(shared_capped_[next_capped]);
      if (shared_frozen_[f]) continue;
      const double cap = cap_of(f);
      if (cap > level * (1 + 1e-12)) break;
      shared_frozen_[f] = 1;
      solve_rates_[f] = cap;
      --unfrozen;
      frozen_sum += cap;
      touched = true;
    }
    auto update = [&]() {
      if (unfrozen == 0) {
        in_heap = false;
      } else {
        key = std::max((capacity - frozen_sum) / static_cast<double>(unfrozen), level);
      }
    };
    if (touched) update();
    if (in_heap && key <= level * (1 + 1e-9)) {
      for (std::size_t f = 0; f < n; ++f) {
        if (shared_frozen_[f]) continue;
        shared_frozen_[f] = 1;
        solve_rates_[f] = level;
        --unfrozen;
        frozen_sum += level;
      }
      update();
    }
  }
  for (int32_t slot : solve_slots_) slots_[static_cast<std::size_t>(slot)].seen = false;
}

// What MaxMinSolver gives a component of one flow, without building the problem: progressive
// filling reaches λ = min(min_l C_l / n_l, B) in one round (n_l: how often the path crosses l),
// and the flow keeps its bound B when B ≤ λ·(1 + 1e-12) (max_min.cpp), else λ.
double FlowNetwork::single_flow_rate(const Flow& f) const {
  double link_level = kNoRateCap;
  const std::size_t n = f.path.size();
  for (std::size_t k = 0; k < n; ++k) {
    const double c = capacity_Bps_[static_cast<std::size_t>(f.path[k])];
    if (!f.repeats) {
      link_level = std::min(link_level, c);
      continue;
    }
    const auto crossings = std::count(f.path.begin(), f.path.end(), f.path[k]);
    link_level = std::min(link_level, c / static_cast<double>(crossings));
  }
  const double level = std::min(link_level, f.rate_cap_Bps);
  return f.rate_cap_Bps <= level * (1 + 1e-12) ? f.rate_cap_Bps : level;
}

// Bytes move lazily: a flow's remaining_bytes is brought up to date only when its rate changes
// (or when asked), as  b − r·(t − t_updated)/1e9, so advancing time costs nothing per flow.
// rate·dt / 1e9 (not rate·(dt·1e-9)): exact whenever rate·dt is a whole number of bytes·1e9.
double FlowNetwork::remaining_at(const Flow& f, int64_t t_ns) const {
  if (!f.active) return f.remaining_bytes;
  if (f.rate_Bps == kNoRateCap) return 0.0;
  const double moved = f.rate_Bps * static_cast<double>(t_ns - f.updated_ns) / 1e9;
  return std::max(0.0, f.remaining_bytes - moved);
}

void FlowNetwork::settle(Flow& f) {
  f.remaining_bytes = remaining_at(f, now_ns_);
  f.updated_ns = now_ns_;
}

// Takes the flows whose next event is due, earliest first. A flow that activates here may be due
// again at once (no bytes, no links): it is taken again and completes in the same call. The order
// changes nothing: completions are sorted by (time, id) and components are solved in id order.
void FlowNetwork::process_events_at(int64_t t_ns) {
  while (!events_.empty() && events_.front().time_ns <= t_ns) {
    const int32_t slot = events_.front().slot;
    Flow& f = slots_[static_cast<std::size_t>(slot)];
    if (f.active) {
      completions_.push_back({f.id, t_ns});
      remove_event(slot);
      on_finish(slot);
      f.id = -1;
      f.active = false;
      free_slots_.push_back(slot);
      --live_;
    } else {
      f.active = true;
      f.rate_Bps = 0;
      f.finish_ns = kNeverNs;
      f.updated_ns = t_ns;
      on_activate(slot);
      update_event(slot);
    }
  }
}

void FlowNetwork::place_event(std::size_t pos, EventEntry e) {
  events_[pos] = e;
  slots_[static_cast<std::size_t>(e.slot)].heap_pos = static_cast<int32_t>(pos);
}

// Puts e at pos and restores the heap order, moving it up or down.
void FlowNetwork::sift_event(std::size_t pos, EventEntry e) {
  while (pos > 0 && e < events_[(pos - 1) / 2]) {
    place_event(pos, events_[(pos - 1) / 2]);
    pos = (pos - 1) / 2;
  }
  for (;;) {
    std::size_t child = 2 * pos + 1;
    if (child >= events_.size()) break;
    if (child + 1 < events_.size() && events_[child + 1] < events_[child]) ++child;
    if (!(events_[child] < e)) break;
    place_event(pos, events_[child]);
    pos = child;
  }
  place_event(pos, e);
}

void FlowNetwork::update_event(int32_t slot) {
  const Flow& f = slots_[static_cast<std::size_t>(slot)];
  const EventEntry e{f.active ? f.finish_ns : f.activate_ns, slot};
  if (f.heap_pos < 0) {
    events_.push_back(e);
    sift_event(events_.size() - 1, e);
  } else if (events_[static_cast<std::size_t>(f.heap_pos)].time_ns != e.time_ns) {
    sift_event(static_cast<std::size_t>(f.heap_pos), e);
  }
}

void FlowNetwork::remove_event(int32_t slot) {
  Flow& f = slots_[static_cast<std::size_t>(slot)];
  const auto pos = static_cast<std::size_t>(f.heap_pos);
  f.heap_pos = -1;
  const EventEntry last = events_.back();
  events_.pop_back();
  if (last.slot != slot) sift_event(pos, last);
}

void FlowNetwork::mark_links(const Flow& f) {
  for (LinkId l : f.path) {
    const auto li = static_cast<std::size_t>(l);
    if (!link_dirty_[li]) {
      link_dirty_[li] = 1;
      dirty_links_.push_back(l);
    }
  }
}

// A flow joins its links; with no link it runs at its cap (infinite: it finishes at once).
void FlowNetwork::on_activate(int32_t slot) {
  dirty_ = true;
  if (link_dirty_.size() != capacity_Bps_.size()) {
    link_dirty_.assign(capacity_Bps_.size(), 0);
    on_link_.assign(capacity_Bps_.size(), {});
  }
  Flow& f = slots_[static_cast<std::size_t>(slot)];
  if (f.path.empty()) {
    f.rate_Bps = f.rate_cap_Bps;
    f.finish_ns = now_ns_ + transfer_time_ns(f.remaining_bytes, f.rate_cap_Bps);
    return;
  }
  // Alone on every link (and on no link another change is pending for): its component is itself,
  // so its rate is known without a re-solve.
  bool alone = fast_paths_;
  for (LinkId l : f.path) {
    const auto li = static_cast<std::size_t>(l);
    alone = alone && on_link_[li].empty() && !link_dirty_[li];
  }
  for (LinkId l : f.path) on_link_[static_cast<std::size_t>(l)].push_back(slot);
  if (!alone) {
    if (!fast_paths_ || !join_pair(slot)) mark_links(f);
    return;
  }
  f.rate_Bps = single_flow_rate(f);
  f.finish_ns = now_ns_ + transfer_time_ns(f.remaining_bytes, f.rate_Bps);
}

// A finished flow leaves its links; the flows left there may speed up.
void FlowNetwork::on_finish(int32_t slot) {
  dirty_ = true;
  const Flow& f = slots_[static_cast<std::size_t>(slot)];
  for (LinkId l : f.path) {
    std::vector<int32_t>& list = on_link_[static_cast<std::size_t>(l)];
    auto it = std::find(list.begin(), list.end(), slot);
    if (it != list.end()) list.erase(it);  // a path may cross a link twice: one entry per crossing
  }
  if (!fast_paths_ || !leave_one_alone(f)) mark_links(f);
}

const std::vector<FlowCompletion>& FlowNetwork::advance_through_events(int64_t t_ns) {
  if (t_ns < now_ns_) {
    throw std::invalid_argument("FlowNetwork::advance_to: time " + std::to_string(t_ns) + " ns is before now (" +
                                std::to_string(now_ns_) + " ns)");
  }
  completions_.clear();
  for (;;) {
    refresh();
    if (next_event_ns_ > t_ns) break;
    now_ns_ = next_event_ns_;
    process_events_at(now_ns_);
  }
  now_ns_ = t_ns;
  std::sort(completions_.begin(), completions_.end(), [](const FlowCompletion& a, const FlowCompletion& b) {
    return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.id < b.id);
  });
  return completions_;
}

int32_t FlowNetwork::slot_of(FlowId id, const char* what) const {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].id == id && id >= 0) return static_cast<int32_t>(i);
  }
  const bool finished = id >= 0 && id < next_id_;
  throw std::out_of_range(std::string("FlowNetwork::") + what + ": flow " + std::to_string(id) +
                          (finished ? " has finished" : " was never started"));
}

FlowState FlowNetwork::state(FlowId id) const {
  if (id < 0 || id >= next_id_) {
    throw std::out_of_range("FlowNetwork::state: flow " + std::to_string(id) + " was never started");
  }
  for (const Flow& f : slots_) {
    if (f.id == id) return f.active ? FlowState::kActive : FlowState::kPending;
  }
  return FlowState::kFinished;
}

double FlowNetwork::rate_Bps(FlowId id) {
  refresh();
  const Flow& f = slots_[static_cast<std::size_t>(slot_of(id, "rate_Bps"))];
  return f.active ? f.rate_Bps : 0.0;
}

double FlowNetwork::remaining_bytes(FlowId id) const {
  return remaining_at(slots_[static_cast<std::size_t>(slot_of(id, "remaining_bytes"))], now_ns_);
}

int64_t FlowNetwork::finish_time_ns(FlowId id) {
  refresh();
  const Flow& f = slots_[static_cast<std::size_t>(slot_of(id, "finish_time_ns"))];
  return f.active ? f.finish_ns : kNeverNs;
}

}  // namespace stagecraft::sim
