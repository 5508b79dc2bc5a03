#include "sim/models/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
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

CollectiveCost::CollectiveCost(CollectiveKind kind, std::span<const int64_t> placement, const Topology& topology,
                               const DispatchRouting* dispatch)
    : kind_(kind), group_size_(static_cast<int64_t>(placement.size())) {
  if (dispatch != nullptr && kind != CollectiveKind::kAllToAll) {
    throw std::invalid_argument("CollectiveCost: a dispatch is an all-to-all, got " + to_string(kind));
  }
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
    all_to_all(placement, topology, dispatch);
    return;
  }
  bus_ = group_bus(placement, topology);
  nccl_.emplace(kind, NcclGroup{group_size_, bus_.nodes, bus_.Bps}, topology.nccl());
}

// The all-to-all's terms (collectives.hpp): k, each member's NIC share and NVLink egress, the
// binding one of the two into bus_ and a2a_share_, and its latency.
void CollectiveCost::all_to_all(std::span<const int64_t> placement, const Topology& topology, const DispatchRouting* dispatch) {
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
  double remote = on_node.size() > 1 ? static_cast<double>(n - k) / static_cast<double>(n) : 0.0;
  double local = static_cast<double>(k - 1) / static_cast<double>(n);
  auto per_byte = [&](double r, double l) { return std::max(r > 0 ? r / nic : 0.0, l > 0 ? l / nvlink : 0.0); };
  if (dispatch != nullptr) {
    const double plain = per_byte(remote, local);
    const DispatchShares d = dispatch_shares(*dispatch, placement, topology.gpus_per_node());
    remote = d.remote;
    local = d.local;
    flow_scale_ = plain > 0 ? per_byte(remote, local) / plain : 1.0;
  }
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

namespace {

// C(P − a, k) / C(P, k): k drawn from P without replacement all miss a set of a.
double miss_all(int64_t pool, int64_t a, int64_t k) {
  if (a <= 0) return 1.0;
  if (pool - a < k) return 0.0;
  double p = 1.0;
  for (int64_t i = 0; i < k; ++i) p *= static_cast<double>(pool - a - i) / static_cast<double>(pool - i);
  return p;
}

}  // namespace

double expected_sets_hit(const DispatchRouting& r, const std::vector<std::vector<int64_t>>& blocks) {
  const int64_t E = r.experts, k = r.top_k;
  if (E <= 0 || k <= 0 || k > E) {
    throw std::invalid_argument("expected_sets_hit: top " + std::to_string(k) + " of " + std::to_string(E) +
                                " experts; expected 1 <= k <= E");
  }
  const bool grouped = r.groups > 1 && r.group_top_k > 0 && r.group_top_k < r.groups;
  if (grouped && E % r.groups != 0) {
    throw std::invalid_argument("expected_sets_hit: " + std::to_string(E) + " experts in " + std::to_string(r.groups) +
                                " groups; expected a divisor");
  }
  double total = 0;
  for (const std::vector<int64_t>& block : blocks) {
    if (!grouped) {
      total += 1.0 - miss_all(E, static_cast<int64_t>(block.size()), k);
      continue;
    }
    // the block's experts in each group; the subsets of g groups by how many they hold (a count
    // of subsets per (groups chosen, experts held), over all G groups)
    const int64_t G = r.groups, g = r.group_top_k, size = E / G, pool = g * size;
    std::vector<int64_t> in_group(static_cast<std::size_t>(G), 0);
    for (int64_t e : block) ++in_group[static_cast<std::size_t>(e / size)];
    const auto A = static_cast<int64_t>(block.size());
    std::vector<std::vector<double>> ways(static_cast<std::size_t>(g + 1), std::vector<double>(static_cast<std::size_t>(A + 1), 0.0));
    ways[0][0] = 1;
    for (int64_t i = 0; i < G; ++i) {
      const int64_t a = in_group[static_cast<std::size_t>(i)];
      for (int64_t c = std::min(i + 1, g); c >= 1; --c) {
        for (int64_t s = A; s >= a; --s) ways[static_cast<std::size_t>(c)][static_cast<std::size_t>(s)] +=
            ways[static_cast<std::size_t>(c - 1)][static_cast<std::size_t>(s - a)];
      }
    }
    double subsets = 0, missed = 0;
    for (int64_t s = 0; s <= A; ++s) {
      const double w = ways[static_cast<std::size_t>(g)][static_cast<std::size_t>(s)];
      subsets += w;
      missed += w * miss_all(pool, s, std::min(k, pool));
    }
    total += 1.0 - missed / subsets;
  }
  return total;
}

DispatchShares dispatch_shares(const DispatchRouting& r, std::span<const int64_t> placement, int64_t gpus_per_node) {
  const auto n = static_cast<int64_t>(placement.size());
  if (r.ep < 1 || r.etp < 1 || r.ep * r.etp != n || r.experts % r.ep != 0) {
    throw std::invalid_argument("dispatch_shares: ep " + std::to_string(r.ep) + " × etp " + std::to_string(r.etp) +
                                " over " + std::to_string(n) + " ranks and " + std::to_string(r.experts) +
                                " experts; expected ep·etp ranks and ep dividing the experts");
  }
  DispatchShares d;
  const int64_t per_place = r.experts / r.ep;
  // each expert-parallel place's experts; each node's places (etp fastest in the group)
  std::map<int64_t, std::set<int64_t>> places_of_node;
  for (int64_t i = 0; i < n; ++i) places_of_node[placement[static_cast<std::size_t>(i)] / gpus_per_node].insert(i / r.etp);
  std::vector<std::vector<int64_t>> places(static_cast<std::size_t>(r.ep)), nodes;
  for (int64_t p = 0; p < r.ep; ++p) {
    for (int64_t e = 0; e < per_place; ++e) places[static_cast<std::size_t>(p)].push_back(p * per_place + e);
  }
  for (const auto& [node, ps] : places_of_node) {
    std::vector<int64_t> experts;
    for (int64_t p : ps) experts.insert(experts.end(), places[static_cast<std::size_t>(p)].begin(), places[static_cast<std::size_t>(p)].end());
    nodes.push_back(std::move(experts));
  }
  d.nodes = static_cast<int64_t>(nodes.size());
  d.per_node = n / d.nodes;
  d.ranks_hit = static_cast<double>(r.etp) * expected_sets_hit(r, places);
  d.nodes_hit = d.nodes > 1 ? expected_sets_hit(r, nodes) : 1.0;
  const double copies = static_cast<double>(r.etp * r.top_k);   // S per token's u bytes
  const double N = static_cast<double>(d.nodes), l = static_cast<double>(d.per_node);
  d.remote = d.nodes > 1 ? d.nodes_hit * (N - 1) / N / copies : 0.0;
  d.local = d.ranks_hit * (1 - 1 / l) / copies;
  return d;
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
