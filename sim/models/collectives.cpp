#include "sim/models/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "sim/network/flows.hpp"

namespace stagecraft::sim {

namespace {

void validate(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement, const Topology& topology) {
  const std::string what = "collective " + to_string(kind) + " of " + std::to_string(bytes) + " bytes over " +
                           std::to_string(placement.size()) + " GPUs: ";
  if (bytes < 0) throw std::invalid_argument(what + "bytes must be >= 0");
  if (placement.empty()) throw std::invalid_argument(what + "the placement is empty");
  if (kind == CollectiveKind::kSendRecv && placement.size() != 2) {
    throw std::invalid_argument(what + "send/recv needs exactly {src, dst}");
  }
  std::vector<int64_t> sorted(placement.begin(), placement.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= topology.gpus()) {
      throw std::invalid_argument(what + "GPU " + std::to_string(sorted[i]) + " outside the topology's [0, " +
                                  std::to_string(topology.gpus()) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw std::invalid_argument(what + "GPU " + std::to_string(sorted[i]) + " appears twice");
    }
  }
}

}  // namespace

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kSendRecv: return "send/recv";
    case CollectiveKind::kAllToAll: return "all-to-all";
  }
  return "unknown";
}

std::optional<CollectiveKind> collective_kind(program::Op op) {
  using program::Op;
  switch (op) {
    case Op::kGatherParams:
    case Op::kAllGatherParams:
    case Op::kTpAllGather:
    case Op::kCpAllGather: return CollectiveKind::kAllGather;
    case Op::kReduceScatterGrads:
    case Op::kTpReduceScatter:
    case Op::kCpReduceScatter: return CollectiveKind::kReduceScatter;
    case Op::kAllReduceGrads:
    case Op::kTpAllReduce:
    case Op::kGradNormAllReduce: return CollectiveKind::kAllReduce;
    case Op::kAllToAll: return CollectiveKind::kAllToAll;
    default: return std::nullopt;
  }
}

double bus_bandwidth_factor(CollectiveKind kind, int64_t n) {
  if (n < 1) throw std::invalid_argument("bus_bandwidth_factor: group size must be >= 1, got " + std::to_string(n));
  const double nd = static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (nd - 1) / nd;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return (nd - 1) / nd;
    case CollectiveKind::kSendRecv: return 1.0;
  }
  return 1.0;
}

double algbw_Bps(int64_t bytes, int64_t time_ns) {
  if (time_ns <= 0) throw std::invalid_argument("algbw_Bps: time must be > 0 ns, got " + std::to_string(time_ns));
  return static_cast<double>(bytes) * 1e9 / static_cast<double>(time_ns);
}

double busbw_Bps(CollectiveKind kind, int64_t bytes, int64_t n, int64_t time_ns) {
  return algbw_Bps(bytes, time_ns) * bus_bandwidth_factor(kind, n);
}

GroupBus group_bus(std::span<const int64_t> placement, const Topology& topology) {
  GroupBus bus;
  bus.Bps = std::numeric_limits<double>::infinity();
  if (placement.size() < 2) return bus;
  std::vector<int64_t> nodes;                       // distinct nodes, in order of appearance
  std::vector<std::vector<int64_t>> nics;           // per node: the distinct NICs its members use
  std::vector<int64_t> members;                     // per node: how many members
  std::vector<int32_t> index_of(static_cast<std::size_t>(topology.nodes()), -1);  // node -> its place in `nodes`
  std::vector<std::size_t> at(placement.size());    // each member's place in `nodes`
  for (std::size_t m = 0; m < placement.size(); ++m) {
    const int64_t gpu = placement[m];
    const int64_t node = topology.node_of(gpu);
    int32_t& i = index_of[static_cast<std::size_t>(node)];
    if (i < 0) {
      i = static_cast<int32_t>(nodes.size());
      nodes.push_back(node);
      nics.emplace_back();
      members.push_back(0);
    }
    at[m] = static_cast<std::size_t>(i);
    ++members[at[m]];
    if (topology.nodes() > 1) {
      const int64_t nic = topology.nic_of(gpu);
      std::vector<int64_t>& used = nics[at[m]];
      if (std::find(used.begin(), used.end(), nic) == used.end()) used.push_back(nic);
    }
  }
  bus.nodes = static_cast<int64_t>(nodes.size());
  // the NVLink egress of every member on a node it shares with another
  for (std::size_t m = 0; m < placement.size(); ++m) {
    if (members[at[m]] < 2) continue;
    const double c = topology.link(topology.nvlink_egress(placement[m])).bandwidth_Bps;
    if (c < bus.Bps) {
      bus.Bps = c;
      bus.network = false;
      bus.rho = 1;
    }
  }
  if (bus.nodes > 1) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      double egress = 0;
      for (int64_t nic : nics[i]) egress += topology.link(topology.nic_egress(nodes[i], nic)).bandwidth_Bps;
      const double up = topology.link(topology.uplink(nodes[i])).bandwidth_Bps;
      const double node_Bps = std::min(egress, up);
      if (node_Bps < bus.Bps) {
        bus.Bps = node_Bps;
        bus.network = true;
        bus.rho = node_Bps / topology.link(topology.nic_egress(nodes[i], nics[i].front())).bandwidth_Bps;
      }
    }
  }
  return bus;
}

CollectiveCost::CollectiveCost(CollectiveKind kind, std::span<const int64_t> placement, const Topology& topology)
    : kind_(kind), group_size_(static_cast<int64_t>(placement.size())) {
  validate(kind, 0, placement, topology);
  if (placement.size() < 2) return;
  if (kind == CollectiveKind::kSendRecv) {
    Route r = topology.route(placement[0], placement[1]);
    send_latency_ns_ = r.latency_ns;
    send_Bps_ = std::numeric_limits<double>::infinity();
    for (LinkId l : r.links) send_Bps_ = std::min(send_Bps_, topology.link(l).bandwidth_Bps);
    return;
  }
  if (kind == CollectiveKind::kAllToAll) {
    all_to_all(placement, topology);
    return;
  }
  bus_ = group_bus(placement, topology);
  nccl_.emplace(kind, NcclGroup{group_size_, bus_.nodes, bus_.Bps}, topology.nccl());
}

// The all-to-all's terms (collectives.hpp): k, each member's NIC share and NVLink egress, the
// binding one of the two into bus_ and a2a_share_, and its latency.
void CollectiveCost::all_to_all(std::span<const int64_t> placement, const Topology& topology) {
  std::map<int64_t, int64_t> on_node;                    // node -> members
  std::map<std::pair<int64_t, int64_t>, int64_t> on_nic; // (node, NIC) -> members
  for (int64_t gpu : placement) {
    ++on_node[topology.node_of(gpu)];
    if (topology.nodes() > 1) ++on_nic[{topology.node_of(gpu), topology.nic_of(gpu)}];
  }
  int64_t k = 0;
  for (const auto& [node, m] : on_node) k = std::max(k, m);
  const int64_t n = group_size_;
  const double inf = std::numeric_limits<double>::infinity();
  double nic = inf, nvlink = inf, nic_line = 0, nvlink_line = 0;   // *_line: one link's own rate (rho's base)
  for (const auto& [key, m] : on_nic) {
    const double egress = topology.link(topology.nic_egress(key.first, key.second)).bandwidth_Bps;
    nic_line = egress;
    const double up = topology.link(topology.uplink(key.first)).bandwidth_Bps / static_cast<double>(on_node[key.first]);
    nic = std::min({nic, egress / static_cast<double>(m), up});
  }
  if (k > 1) {
    for (int64_t gpu : placement) nvlink = std::min(nvlink, topology.link(topology.nvlink_egress(gpu)).bandwidth_Bps);
    nvlink_line = nvlink;
  }
  const double remote = on_node.size() > 1 ? static_cast<double>(n - k) / static_cast<double>(n) : 0.0;
  const double local = static_cast<double>(k - 1) / static_cast<double>(n);
  // the term that takes longer per byte of S binds
  const bool network = remote > 0 && (local == 0 || remote / nic >= local / nvlink);
  bus_.nodes = static_cast<int64_t>(on_node.size());
  bus_.network = network;
  bus_.Bps = network ? nic : nvlink;
  bus_.rho = bus_.Bps / (network ? nic_line : nvlink_line);
  a2a_share_ = network ? remote : local;
  const NcclBand& band = nccl_band(topology.nccl().minor);
  constexpr int kRing = 1, kSimple = 2;
  const double hop = network ? band.net_lat[kRing][kSimple] : band.nvlink_lat[kRing][kSimple];
  a2a_latency_s_ = (band.base_lat[kRing][kSimple] + hop) * topology.nccl().latency_scale * 1e-6;
}

NcclChoice CollectiveCost::choose(int64_t bytes) const {
  if (kind_ == CollectiveKind::kAllToAll && group_size_ > 1) {
    NcclChoice c;  // point-to-point, Simple (collectives.hpp)
    c.latency_s = a2a_latency_s_;
    c.alg_Bps = bus_.Bps / a2a_share_;
    c.bus_fraction = 1 / a2a_share_;
    c.seconds = c.latency_s + static_cast<double>(bytes) / c.alg_Bps;
    return c;
  }
  if (!nccl_) return {};
  return nccl_->choose(bytes);
}

int64_t CollectiveCost::time_ns(int64_t bytes) const {
  if (bytes < 0) {
    throw std::invalid_argument("CollectiveCost::time_ns: " + to_string(kind_) + " of " + std::to_string(bytes) +
                                " bytes; expected >= 0");
  }
  if (group_size_ < 2) return 0;
  if (kind_ == CollectiveKind::kSendRecv) {
    return send_latency_ns_ + transfer_time_ns(static_cast<double>(bytes), send_Bps_);
  }
  if (kind_ == CollectiveKind::kAllToAll) {
    if (bytes == 0) return 0;
    return static_cast<int64_t>(std::ceil(choose(bytes).seconds * 1e9));
  }
  return nccl_->time_ns(bytes);
}

int64_t collective_time_ns(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                           const Topology& topology) {
  validate(kind, bytes, placement, topology);
  return CollectiveCost(kind, placement, topology).time_ns(bytes);
}

}  // namespace stagecraft::sim
