#include "sim/network/flows.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stagecraft::sim {

int64_t transfer_time_ns(double bytes, double rate_Bps) {
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
  Flow f;
  f.id = next_id_++;
  f.activate_ns = now_ns_ + latency_ns;
  f.remaining_bytes = static_cast<double>(bytes);
  f.rate_cap_Bps = rate_cap_Bps;
  f.path_begin = static_cast<int32_t>(paths_.size());
  f.path_size = static_cast<int32_t>(path.size());
  f.active = latency_ns == 0;
  paths_.insert(paths_.end(), path.begin(), path.end());
  flows_.push_back(f);
  if (f.active) {
    on_activate(flows_.back());
  } else if (!dirty_) {
    next_event_ns_ = std::min(next_event_ns_, f.activate_ns);
  }
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
  solve_index_.clear();
  solve_capacity_.clear();
  if (local_link_.size() != capacity_Bps_.size()) local_link_.assign(capacity_Bps_.size(), -1);
  if (flow_seen_.size() < flows_.size()) flow_seen_.resize(flows_.size(), 0);
  // Breadth-first over links: every active flow on a reached link joins, and so do its links.
  for (std::size_t next = 0; next < dirty_links_.size(); ++next) {
    const LinkId l = dirty_links_[next];
    for (FlowId id : on_link_[static_cast<std::size_t>(l)]) {
      const std::size_t i = index_of(id, "solve_rates");
      if (flow_seen_[i]) continue;
      flow_seen_[i] = 1;
      const Flow& f = flows_[i];
      for (int32_t k = 0; k < f.path_size; ++k) {
        const LinkId m = paths_[static_cast<std::size_t>(f.path_begin + k)];
        if (!link_dirty_[static_cast<std::size_t>(m)]) {
          link_dirty_[static_cast<std::size_t>(m)] = 1;
          dirty_links_.push_back(m);
        }
      }
      solve_index_.push_back(i);
    }
  }
  for (LinkId l : dirty_links_) link_dirty_[static_cast<std::size_t>(l)] = 0;
  dirty_links_.clear();
  std::sort(solve_index_.begin(), solve_index_.end());  // flow-id order: deterministic labels
  for (std::size_t i : solve_index_) {
    flow_seen_[i] = 0;
    const Flow& f = flows_[i];
    for (int32_t k = 0; k < f.path_size; ++k) {
      const LinkId l = paths_[static_cast<std::size_t>(f.path_begin + k)];
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
  if (solve_index_.empty()) return;
  solve_rates_.assign(solve_index_.size(), 0.0);
  solver_.solve({solve_capacity_, solve_offsets_, solve_links_, solve_caps_}, solve_rates_);
  for (std::size_t k = 0; k < solve_index_.size(); ++k) {
    Flow& f = flows_[solve_index_[k]];
    const double rate = solve_rates_[k];
    if (rate == f.rate_Bps && f.finish_ns != kNeverNs) continue;  // keep the prediction exact
    f.rate_Bps = rate;
    const int64_t left_ns = transfer_time_ns(f.remaining_bytes, rate);
    if (left_ns > kNeverNs - 1 - now_ns_) {
      throw std::overflow_error("FlowNetwork: flow " + std::to_string(f.id) + " would finish past the int64_t horizon");
    }
    f.finish_ns = now_ns_ + left_ns;
  }
}

void FlowNetwork::refresh() {
  if (!dirty_) return;
  solve_rates();
  next_event_ns_ = kNeverNs;
  for (const Flow& f : flows_) next_event_ns_ = std::min(next_event_ns_, f.active ? f.finish_ns : f.activate_ns);
  dirty_ = false;
}

int64_t FlowNetwork::next_event_time_ns() {
  refresh();
  return next_event_ns_;
}

void FlowNetwork::move_time_to(int64_t t_ns) {
  if (t_ns == now_ns_) return;
  const auto dt_ns = static_cast<double>(t_ns - now_ns_);
  for (Flow& f : flows_) {
    if (!f.active) continue;
    // rate·dt / 1e9 (not rate·(dt·1e-9)): exact whenever rate·dt is a whole number of bytes·1e9.
    const double moved = f.rate_Bps * dt_ns / 1e9;
    f.remaining_bytes = f.rate_Bps == kNoRateCap ? 0.0 : std::max(0.0, f.remaining_bytes - moved);
  }
  now_ns_ = t_ns;
}

void FlowNetwork::process_events_at(int64_t t_ns) {
  bool finished = false;
  for (Flow& f : flows_) {
    if (f.active && f.finish_ns <= t_ns) {
      completions_.push_back({f.id, t_ns});
      on_finish(f);
      f.remaining_bytes = 0;
      f.path_size = -1;  // marks the flow for compact()
      finished = true;
    } else if (!f.active && f.activate_ns <= t_ns) {
      f.active = true;
      f.rate_Bps = 0;
      f.finish_ns = kNeverNs;
      on_activate(f);
    }
  }
  if (finished) compact();
}

void FlowNetwork::mark_links(const Flow& f) {
  for (int32_t k = 0; k < f.path_size; ++k) {
    const auto l = static_cast<std::size_t>(paths_[static_cast<std::size_t>(f.path_begin + k)]);
    if (!link_dirty_[l]) {
      link_dirty_[l] = 1;
      dirty_links_.push_back(static_cast<LinkId>(l));
    }
  }
}

// A flow joins its links; with no link it runs at its cap (infinite: it finishes at once).
void FlowNetwork::on_activate(Flow& f) {
  dirty_ = true;
  if (link_dirty_.size() != capacity_Bps_.size()) {
    link_dirty_.assign(capacity_Bps_.size(), 0);
    on_link_.assign(capacity_Bps_.size(), {});
  }
  if (f.path_size == 0) {
    f.rate_Bps = f.rate_cap_Bps;
    f.finish_ns = now_ns_ + transfer_time_ns(f.remaining_bytes, f.rate_cap_Bps);
    return;
  }
  for (int32_t k = 0; k < f.path_size; ++k) on_link_[static_cast<std::size_t>(paths_[static_cast<std::size_t>(f.path_begin + k)])].push_back(f.id);
  mark_links(f);
}

// A finished flow leaves its links; the flows left there may speed up.
void FlowNetwork::on_finish(const Flow& f) {
  dirty_ = true;
  for (int32_t k = 0; k < f.path_size; ++k) {
    std::vector<FlowId>& list = on_link_[static_cast<std::size_t>(paths_[static_cast<std::size_t>(f.path_begin + k)])];
    auto it = std::find(list.begin(), list.end(), f.id);
    if (it != list.end()) list.erase(it);  // a path may cross a link twice: one entry per crossing
  }
  mark_links(f);
}

void FlowNetwork::compact() {
  std::size_t kept = 0;
  std::size_t path_end = 0;
  for (std::size_t i = 0; i < flows_.size(); ++i) {
    Flow f = flows_[i];
    if (f.path_size < 0) continue;
    std::copy_n(paths_.begin() + f.path_begin, f.path_size, paths_.begin() + static_cast<std::ptrdiff_t>(path_end));
    f.path_begin = static_cast<int32_t>(path_end);
    path_end += static_cast<std::size_t>(f.path_size);
    flows_[kept++] = f;
  }
  flows_.resize(kept);
  paths_.resize(path_end);
}

const std::vector<FlowCompletion>& FlowNetwork::advance_to(int64_t t_ns) {
  if (t_ns < now_ns_) {
    throw std::invalid_argument("FlowNetwork::advance_to: time " + std::to_string(t_ns) + " ns is before now (" +
                                std::to_string(now_ns_) + " ns)");
  }
  completions_.clear();
  for (;;) {
    refresh();
    if (next_event_ns_ > t_ns) break;
    move_time_to(next_event_ns_);
    process_events_at(now_ns_);
  }
  move_time_to(t_ns);
  std::sort(completions_.begin(), completions_.end(), [](const FlowCompletion& a, const FlowCompletion& b) {
    return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.id < b.id);
  });
  return completions_;
}

std::size_t FlowNetwork::index_of(FlowId id, const char* what) const {
  auto it = std::lower_bound(flows_.begin(), flows_.end(), id, [](const Flow& f, FlowId v) { return f.id < v; });
  if (it == flows_.end() || it->id != id) {
    const bool finished = id >= 0 && id < next_id_;
    throw std::out_of_range(std::string("FlowNetwork::") + what + ": flow " + std::to_string(id) +
                            (finished ? " has finished" : " was never started"));
  }
  return static_cast<std::size_t>(it - flows_.begin());
}

FlowState FlowNetwork::state(FlowId id) const {
  if (id < 0 || id >= next_id_) {
    throw std::out_of_range("FlowNetwork::state: flow " + std::to_string(id) + " was never started");
  }
  auto it = std::lower_bound(flows_.begin(), flows_.end(), id, [](const Flow& f, FlowId v) { return f.id < v; });
  if (it == flows_.end() || it->id != id) return FlowState::kFinished;
  return it->active ? FlowState::kActive : FlowState::kPending;
}

double FlowNetwork::rate_Bps(FlowId id) {
  refresh();
  const Flow& f = flows_[index_of(id, "rate_Bps")];
  return f.active ? f.rate_Bps : 0.0;
}

double FlowNetwork::remaining_bytes(FlowId id) const { return flows_[index_of(id, "remaining_bytes")].remaining_bytes; }

int64_t FlowNetwork::finish_time_ns(FlowId id) {
  refresh();
  const Flow& f = flows_[index_of(id, "finish_time_ns")];
  return f.active ? f.finish_ns : kNeverNs;
}

}  // namespace stagecraft::sim
