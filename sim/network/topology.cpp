#include "sim/network/topology.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace stagecraft::sim {

namespace {

std::string cluster_context(const spec::Cluster& c) {
  return "cluster \"" + c.name + "\"" + (c.file.empty() ? "" : " (" + c.file + ")");
}

void require_positive(const spec::Cluster& c, double value, const char* field) {
  if (!(value > 0) || !std::isfinite(value)) {
    throw std::invalid_argument("Topology: " + cluster_context(c) + ": " + field + " must be a positive number, got " +
                                std::to_string(value));
  }
}

void validate(const spec::Cluster& c, int64_t gpus_in_use) {
  if (c.gpus_per_node < 1 || c.nodes < 1) {
    throw std::invalid_argument("Topology: " + cluster_context(c) + ": needs nodes >= 1 and gpus_per_node >= 1, got " +
                                std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node));
  }
  if (gpus_in_use < 1 || gpus_in_use > c.gpus()) {
    throw std::invalid_argument("Topology: " + cluster_context(c) + ": GPUs in use must be in [1, " +
                                std::to_string(c.gpus()) + "], got " + std::to_string(gpus_in_use));
  }
  require_positive(c, c.intra_node.bandwidth_Bps, "intra_node.bandwidth_Bps");
  if (c.intra_node.latency_ns < 0 || c.inter_node.latency_ns < 0) {
    throw std::invalid_argument("Topology: " + cluster_context(c) + ": latencies must be non-negative");
  }
  const bool multi_node = gpus_in_use > c.gpus_per_node;
  if (multi_node) {
    if (c.inter_node.nics_per_node < 1) {
      throw std::invalid_argument("Topology: " + cluster_context(c) + ": inter_node.nics_per_node must be >= 1 for " +
                                  std::to_string(gpus_in_use) + " GPUs over several nodes, got " +
                                  std::to_string(c.inter_node.nics_per_node));
    }
    require_positive(c, c.inter_node.nic_bandwidth_Bps, "inter_node.nic_bandwidth_Bps");
    if (!(c.inter_node.oversubscription >= 1.0) || !std::isfinite(c.inter_node.oversubscription)) {
      throw std::invalid_argument("Topology: " + cluster_context(c) +
                                  ": inter_node.oversubscription must be >= 1, got " +
                                  std::to_string(c.inter_node.oversubscription));
    }
  }
}

}  // namespace

std::string to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvlinkEgress: return "nvlink-egress";
    case LinkKind::kNvlinkIngress: return "nvlink-ingress";
    case LinkKind::kNicEgress: return "nic-egress";
    case LinkKind::kNicIngress: return "nic-ingress";
    case LinkKind::kUplink: return "uplink";
    case LinkKind::kDownlink: return "downlink";
  }
  return "unknown";
}

Topology::Topology(const spec::Cluster& cluster, int64_t gpus_in_use) {
  validate(cluster, gpus_in_use);
  cluster_name_ = cluster.name;
  gpus_ = gpus_in_use;
  gpus_per_node_ = cluster.gpus_per_node;
  nodes_ = (gpus_ + gpus_per_node_ - 1) / gpus_per_node_;
  nics_per_node_ = cluster.inter_node.nics_per_node;
  intra_latency_ns_ = cluster.intra_node.latency_ns;
  inter_latency_ns_ = cluster.inter_node.latency_ns;
  nccl_ = cluster.nccl;

  const int64_t nic_links = nodes_ > 1 ? 2 * nodes_ * nics_per_node_ : 0;
  const int64_t core_links = nodes_ > 1 ? 2 * nodes_ : 0;
  const int64_t total = 2 * gpus_ + nic_links + core_links;
  if (total > std::numeric_limits<LinkId>::max()) {
    throw std::invalid_argument("Topology: cluster \"" + cluster.name + "\": " + std::to_string(total) +
                                " links exceed the link id range");
  }
  links_.reserve(static_cast<std::size_t>(total));
  const double nvlink_Bps = cluster.intra_node.bandwidth_Bps;
  for (int64_t g = 0; g < gpus_; ++g) {
    links_.push_back({LinkKind::kNvlinkEgress, g / gpus_per_node_, g, nvlink_Bps});
    links_.push_back({LinkKind::kNvlinkIngress, g / gpus_per_node_, g, nvlink_Bps});
  }
  nic_base_ = static_cast<LinkId>(links_.size());
  if (nodes_ > 1) {
    const double nic_Bps = cluster.inter_node.nic_bandwidth_Bps;
    for (int64_t n = 0; n < nodes_; ++n) {
      for (int64_t r = 0; r < nics_per_node_; ++r) {
        // a straggling NIC (the what-if of spec::Straggler) runs at 1/slowdown of its bandwidth
        const spec::Straggler* s = cluster.straggler && cluster.straggler->kind == spec::Straggler::Kind::kNic
                                       ? &*cluster.straggler : nullptr;
        const int64_t nic = n * nics_per_node_ + r;
        const double Bps = s && nic >= s->first && nic < s->first + s->count ? nic_Bps / s->slowdown : nic_Bps;
        links_.push_back({LinkKind::kNicEgress, n, r, Bps});
        links_.push_back({LinkKind::kNicIngress, n, r, Bps});
      }
    }
  }
  core_base_ = static_cast<LinkId>(links_.size());
  if (nodes_ > 1) {
    const double core_Bps = static_cast<double>(nics_per_node_) * cluster.inter_node.nic_bandwidth_Bps /
                            cluster.inter_node.oversubscription;
    for (int64_t n = 0; n < nodes_; ++n) {
      links_.push_back({LinkKind::kUplink, n, n, core_Bps});
      links_.push_back({LinkKind::kDownlink, n, n, core_Bps});
    }
  }
}

void Topology::gpu_out_of_range(int64_t gpu, const char* what) const {
  throw std::out_of_range(std::string("Topology::") + what + ": GPU " + std::to_string(gpu) + " outside [0, " +
                          std::to_string(gpus_) + ") of cluster \"" + cluster_name_ + "\"");
}

void Topology::check_node(int64_t node, const char* what) const {
  if (nodes_ < 2) {
    throw std::out_of_range(std::string("Topology::") + what + ": a single node in use has no NIC or core links");
  }
  if (node < 0 || node >= nodes_) {
    throw std::out_of_range(std::string("Topology::") + what + ": node " + std::to_string(node) + " outside [0, " +
                            std::to_string(nodes_) + ")");
  }
}

int64_t Topology::nic_of(int64_t gpu) const {
  check_gpu(gpu, "nic_of");
  if (nodes_ < 2) throw std::out_of_range("Topology::nic_of: a single node in use has no NICs");
  return (gpu % gpus_per_node_) % nics_per_node_;
}

const Link& Topology::link(LinkId id) const {
  if (id < 0 || id >= link_count()) {
    throw std::out_of_range("Topology::link: id " + std::to_string(id) + " outside [0, " +
                            std::to_string(link_count()) + ")");
  }
  return links_[static_cast<std::size_t>(id)];
}

std::vector<double> Topology::capacities_Bps() const {
  std::vector<double> caps;
  caps.reserve(links_.size());
  for (const Link& l : links_) caps.push_back(l.bandwidth_Bps);
  return caps;
}

std::string Topology::describe(LinkId id) const {
  const Link& l = link(id);
  switch (l.kind) {
    case LinkKind::kNvlinkEgress:
    case LinkKind::kNvlinkIngress: return to_string(l.kind) + "(gpu " + std::to_string(l.index) + ")";
    case LinkKind::kNicEgress:
    case LinkKind::kNicIngress:
      return to_string(l.kind) + "(node " + std::to_string(l.node) + ", nic " + std::to_string(l.index) + ")";
    case LinkKind::kUplink:
    case LinkKind::kDownlink: return to_string(l.kind) + "(node " + std::to_string(l.node) + ")";
  }
  return "link " + std::to_string(id);
}

LinkId Topology::nvlink_egress(int64_t gpu) const {
  check_gpu(gpu, "nvlink_egress");
  return static_cast<LinkId>(2 * gpu);
}

LinkId Topology::nvlink_ingress(int64_t gpu) const {
  check_gpu(gpu, "nvlink_ingress");
  return static_cast<LinkId>(2 * gpu + 1);
}

LinkId Topology::nic_egress(int64_t node, int64_t nic) const {
  check_node(node, "nic_egress");
  if (nic < 0 || nic >= nics_per_node_) throw std::out_of_range("Topology::nic_egress: NIC " + std::to_string(nic));
  return nic_base_ + static_cast<LinkId>(2 * (node * nics_per_node_ + nic));
}

LinkId Topology::nic_ingress(int64_t node, int64_t nic) const {
  check_node(node, "nic_ingress");
  if (nic < 0 || nic >= nics_per_node_) throw std::out_of_range("Topology::nic_ingress: NIC " + std::to_string(nic));
  return nic_base_ + static_cast<LinkId>(2 * (node * nics_per_node_ + nic) + 1);
}

LinkId Topology::uplink(int64_t node) const {
  check_node(node, "uplink");
  return core_base_ + static_cast<LinkId>(2 * node);
}

LinkId Topology::downlink(int64_t node) const {
  check_node(node, "downlink");
  return core_base_ + static_cast<LinkId>(2 * node + 1);
}

int64_t Topology::route_into(int64_t src_gpu, int64_t dst_gpu, std::vector<LinkId>& links) const {
  check_gpu(src_gpu, "route");
  check_gpu(dst_gpu, "route");
  links.clear();
  if (src_gpu == dst_gpu) return 0;
  const int64_t src_node = src_gpu / gpus_per_node_;
  const int64_t dst_node = dst_gpu / gpus_per_node_;
  if (src_node == dst_node) {
    links.push_back(static_cast<LinkId>(2 * src_gpu));
    links.push_back(static_cast<LinkId>(2 * dst_gpu + 1));
    return intra_latency_ns_;
  }
  const int64_t src_nic = (src_gpu % gpus_per_node_) % nics_per_node_;
  const int64_t dst_nic = (dst_gpu % gpus_per_node_) % nics_per_node_;
  links.push_back(nic_base_ + static_cast<LinkId>(2 * (src_node * nics_per_node_ + src_nic)));
  links.push_back(core_base_ + static_cast<LinkId>(2 * src_node));
  links.push_back(core_base_ + static_cast<LinkId>(2 * dst_node + 1));
  links.push_back(nic_base_ + static_cast<LinkId>(2 * (dst_node * nics_per_node_ + dst_nic) + 1));
  return inter_latency_ns_;
}

Route Topology::route(int64_t src_gpu, int64_t dst_gpu) const {
  Route r;
  r.latency_ns = route_into(src_gpu, dst_gpu, r.links);
  return r;
}

int64_t Topology::latency_ns(int64_t src_gpu, int64_t dst_gpu) const {
  check_gpu(src_gpu, "latency_ns");
  check_gpu(dst_gpu, "latency_ns");
  if (src_gpu == dst_gpu) return 0;
  return node_of(src_gpu) == node_of(dst_gpu) ? intra_latency_ns_ : inter_latency_ns_;
}

}  // namespace stagecraft::sim
