#include "sim/models/collectives.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "sim/network/flows.hpp"

namespace stagecraft::sim {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Members grouped by node: nodes in order of first appearance, members in placement order.
std::vector<std::vector<int64_t>> group_by_node(std::span<const int64_t> placement, const Topology& topology) {
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> group_nodes;
  for (int64_t gpu : placement) {
    const int64_t node = topology.node_of(gpu);
    auto it = std::find(group_nodes.begin(), group_nodes.end(), node);
    if (it == group_nodes.end()) {
      group_nodes.push_back(node);
      groups.push_back({gpu});
    } else {
      groups[static_cast<std::size_t>(it - group_nodes.begin())].push_back(gpu);
    }
  }
  return groups;
}

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

// Every member of every ring sends to its successor.
std::vector<std::pair<int64_t, int64_t>> ring_pairs(const std::vector<std::vector<int64_t>>& rings) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const auto& ring : rings) {
    if (ring.size() < 2) continue;
    for (std::size_t i = 0; i < ring.size(); ++i) pairs.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
  }
  return pairs;
}

void add_stage(std::vector<CollectiveStage>& stages, std::string name, const std::vector<std::vector<int64_t>>& rings,
               int64_t steps, int64_t chunk_divisor) {
  if (steps <= 0) return;
  stages.push_back({std::move(name), ring_pairs(rings), steps, chunk_divisor, 0});
}

// One flat ring over `ring` (n members): RS and/or AG stages of n−1 steps of ⌈S/n⌉.
std::vector<CollectiveStage> flat_ring(CollectiveKind kind, const std::vector<int64_t>& ring) {
  const auto n = static_cast<int64_t>(ring.size());
  std::vector<CollectiveStage> stages;
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce) {
    add_stage(stages, "ring reduce-scatter", {ring}, n - 1, n);
  }
  if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllReduce) {
    add_stage(stages, "ring all-gather", {ring}, n - 1, n);
  }
  return stages;
}

// N nodes × k members: NVLink rings inside nodes, one ring per rail across nodes.
std::vector<CollectiveStage> hierarchical(CollectiveKind kind, const std::vector<std::vector<int64_t>>& by_node) {
  const auto nodes = static_cast<int64_t>(by_node.size());
  const auto k = static_cast<int64_t>(by_node.front().size());
  std::vector<std::vector<int64_t>> rails(static_cast<std::size_t>(k));
  for (const auto& members : by_node) {
    for (int64_t j = 0; j < k; ++j) rails[static_cast<std::size_t>(j)].push_back(members[static_cast<std::size_t>(j)]);
  }
  const bool reduce = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce;
  const bool gather = kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllReduce;
  std::vector<CollectiveStage> stages;
  if (reduce) {
    add_stage(stages, "intra-node reduce-scatter", by_node, k - 1, k);
    add_stage(stages, "inter-node reduce-scatter", rails, nodes - 1, k * nodes);
  }
  if (gather) {
    add_stage(stages, "inter-node all-gather", rails, nodes - 1, k * nodes);
    add_stage(stages, "intra-node all-gather", by_node, k - 1, k);
  }
  return stages;
}

struct StepCost {
  int64_t latency_ns = 0;
  double rate_Bps = std::numeric_limits<double>::infinity();
};

// α and β of one step: largest route latency, and min_l C_l / n_l over the links the step loads.
StepCost step_cost(const CollectiveStage& stage, const Topology& topology) {
  std::vector<int32_t> load(static_cast<std::size_t>(topology.link_count()), 0);
  std::vector<LinkId> touched;
  std::vector<LinkId> path;
  StepCost cost;
  for (const auto& [src, dst] : stage.pairs) {
    cost.latency_ns = std::max(cost.latency_ns, topology.route_into(src, dst, path));
    for (LinkId l : path) {
      if (load[static_cast<std::size_t>(l)]++ == 0) touched.push_back(l);
    }
  }
  for (LinkId l : touched) {
    const double share = topology.link(l).bandwidth_Bps / static_cast<double>(load[static_cast<std::size_t>(l)]);
    cost.rate_Bps = std::min(cost.rate_Bps, share);
  }
  return cost;
}

}  // namespace

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kSendRecv: return "send/recv";
  }
  return "unknown";
}

std::optional<CollectiveKind> collective_kind(program::Op op) {
  using program::Op;
  switch (op) {
    case Op::kGatherParams:
    case Op::kAllGatherParams:
    case Op::kTpAllGather: return CollectiveKind::kAllGather;
    case Op::kReduceScatterGrads:
    case Op::kTpReduceScatter: return CollectiveKind::kReduceScatter;
    case Op::kAllReduceGrads:
    case Op::kTpAllReduce:
    case Op::kGradNormAllReduce: return CollectiveKind::kAllReduce;
    default: return std::nullopt;
  }
}

TreeSteps gradnorm_tree_steps(int64_t world, int64_t gpus_per_node) {
  auto log2ceil = [](int64_t n) {
    int64_t k = 0;
    while ((int64_t{1} << k) < n) ++k;
    return k;
  };
  return {2 * log2ceil(std::min(world, gpus_per_node)), 2 * log2ceil(ceil_div(world, gpus_per_node))};
}

int64_t gradnorm_allreduce_ns(int64_t world, int64_t gpus_per_node, int64_t intra_latency_ns, int64_t inter_latency_ns) {
  const TreeSteps s = gradnorm_tree_steps(world, gpus_per_node);
  return s.intra * intra_latency_ns + s.inter * inter_latency_ns;
}

double bus_bandwidth_factor(CollectiveKind kind, int64_t n) {
  if (n < 1) throw std::invalid_argument("bus_bandwidth_factor: group size must be >= 1, got " + std::to_string(n));
  const double nd = static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (nd - 1) / nd;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return (nd - 1) / nd;
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

namespace {

// The stages without sizes: who sends to whom, how many steps, and the chunk divisor.
std::vector<CollectiveStage> stage_shapes(CollectiveKind kind, std::span<const int64_t> placement,
                                          const Topology& topology) {
  if (placement.size() < 2) return {};
  if (kind == CollectiveKind::kSendRecv) return {{"send/recv", {{placement[0], placement[1]}}, 1, 1, 0}};
  const auto by_node = group_by_node(placement, topology);
  const bool uniform = std::all_of(by_node.begin(), by_node.end(),
                                   [&](const auto& members) { return members.size() == by_node.front().size(); });
  if (by_node.size() > 1 && by_node.front().size() > 1 && uniform) return hierarchical(kind, by_node);
  std::vector<int64_t> ring;
  for (const auto& members : by_node) ring.insert(ring.end(), members.begin(), members.end());
  return flat_ring(kind, ring);
}

}  // namespace

std::vector<CollectiveStage> collective_stages(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                                               const Topology& topology) {
  validate(kind, bytes, placement, topology);
  std::vector<CollectiveStage> stages = stage_shapes(kind, placement, topology);
  for (CollectiveStage& stage : stages) stage.chunk_bytes = ceil_div(bytes, stage.chunk_divisor);
  return stages;
}

CollectiveCost::CollectiveCost(CollectiveKind kind, std::span<const int64_t> placement, const Topology& topology)
    : kind_(kind), group_size_(static_cast<int64_t>(placement.size())) {
  validate(kind, 0, placement, topology);
  for (const CollectiveStage& stage : stage_shapes(kind, placement, topology)) {
    const StepCost cost = step_cost(stage, topology);
    stages_.push_back({stage.steps, stage.chunk_divisor, cost.latency_ns, cost.rate_Bps});
  }
}

int64_t CollectiveCost::time_ns(int64_t bytes) const {
  if (bytes < 0) {
    throw std::invalid_argument("CollectiveCost::time_ns: " + to_string(kind_) + " of " + std::to_string(bytes) +
                                " bytes; expected >= 0");
  }
  int64_t total_ns = 0;
  for (const StageCost& stage : stages_) {
    const double chunk_bytes = static_cast<double>(ceil_div(bytes, stage.chunk_divisor));
    total_ns += stage.steps * (stage.latency_ns + transfer_time_ns(chunk_bytes, stage.rate_Bps));
  }
  return total_ns;
}

int64_t collective_time_ns(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                           const Topology& topology) {
  validate(kind, bytes, placement, topology);
  return CollectiveCost(kind, placement, topology).time_ns(bytes);
}

}  // namespace stagecraft::sim
