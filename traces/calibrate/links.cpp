#include "traces/calibrate/links.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "core/program/comm_rules.hpp"

namespace stagecraft::traces {

double LinkFeatures::seconds(double alpha_intra_s, double beta_intra_Bps, double alpha_inter_s, double beta_inter_Bps) const {
  return fixed_s + a_intra * alpha_intra_s + b_intra / beta_intra_Bps + a_inter * alpha_inter_s + b_inter / beta_inter_Bps;
}

LinkModel::LinkModel(const spec::Cluster& cluster, int64_t gpus) : cluster_(cluster), topology_(cluster, gpus) {}

bool LinkModel::crosses_nodes(const std::vector<std::pair<int64_t, int64_t>>& pairs) const {
  return std::any_of(pairs.begin(), pairs.end(),
                     [&](const auto& p) { return topology_.node_of(p.first) != topology_.node_of(p.second); });
}

LinkModel::Bottleneck LinkModel::bottleneck(const std::vector<std::pair<int64_t, int64_t>>& pairs) const {
  std::map<sim::LinkId, int64_t> crossing;
  for (const auto& [src, dst] : pairs) {
    for (sim::LinkId l : topology_.route(src, dst).links) ++crossing[l];
  }
  Bottleneck b;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [id, n] : crossing) {
    const sim::Link& link = topology_.link(id);
    const double rate = link.bandwidth_Bps / static_cast<double>(n);
    if (rate >= best) continue;
    best = rate;
    const bool nvlink = link.kind == sim::LinkKind::kNvlinkEgress || link.kind == sim::LinkKind::kNvlinkIngress;
    b.inter = !nvlink;
    b.rho = rate / (nvlink ? cluster_.intra_node.bandwidth_Bps : cluster_.inter_node.nic_bandwidth_Bps);
  }
  return b;
}

LinkFeatures LinkModel::collective(sim::CollectiveKind kind, int64_t bytes, std::span<const int64_t> gpus) const {
  LinkFeatures f;
  const sim::CollectiveCost cost(kind, gpus, topology_);
  const sim::NcclChoice c = cost.choose(bytes);
  if (!(c.seconds > 0)) return f;
  f.fixed_s = c.latency_s;
  const double S = static_cast<double>(bytes);
  const sim::GroupBus& bus = cost.bus();
  if (c.bus_fraction > 0) {
    (bus.network ? f.b_inter : f.b_intra) += S / (c.bus_fraction * bus.rho);
  } else {
    f.fixed_s += S / c.alg_Bps;
  }
  return f;
}

LinkFeatures LinkModel::p2p(int64_t src_gpu, int64_t dst_gpu, int64_t bytes) const {
  const std::vector<std::pair<int64_t, int64_t>> pair = {{src_gpu, dst_gpu}};
  LinkFeatures f;
  (crosses_nodes(pair) ? f.a_inter : f.a_intra) += 1;
  const Bottleneck b = bottleneck(pair);
  (b.inter ? f.b_inter : f.b_intra) += static_cast<double>(bytes) / b.rho;
  return f;
}

LinkFeatures LinkModel::gradnorm_allreduce(int64_t world) const {
  std::vector<int64_t> all(static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
  return collective(sim::CollectiveKind::kAllReduce, program::kGradNormBytes, all);
}

}  // namespace stagecraft::traces
