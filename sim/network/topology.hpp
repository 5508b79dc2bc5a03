// Topology: the links of a cluster that flows cross, and the route of a flow between two GPUs.
// It is the simulator's picture of the network, not a packet model: every link is a pipe of
// fixed capacity shared by max-min fairness (max_min.hpp); it knows nothing about collectives.
//
// Model (SCHEMAS.md, cluster.json; spec::Cluster):
//   * GPUs fill nodes in order: GPU g lives on node g / G (G = gpus_per_node), local index g % G.
//   * Inside a node, GPUs hang off a non-blocking NVLink/NVSwitch: each GPU has one egress and
//     one ingress link of intra_node.bandwidth_Bps (per direction). The switch itself is never a
//     bottleneck, so it has no link.
//   * Between nodes, each node has R = nics_per_node rail-aligned NICs: GPU with local index j
//     uses NIC j % R, one egress and one ingress link of nic_bandwidth_Bps each.
//   * The NICs join a fat tree whose core is modelled as one uplink and one downlink per node,
//     each of capacity  R · nic_bandwidth_Bps / oversubscription  (a taper of 2 halves it).
//   * route(src, dst):
//       same GPU      -> no links, latency 0
//       same node     -> [NVLink egress(src), NVLink ingress(dst)],  intra_node.latency_ns
//       other node    -> [NIC egress(nic(src)), uplink(node(src)), downlink(node(dst)),
//                         NIC ingress(nic(dst))],                     inter_node.latency_ns
//     (rail-aligned: a cross-node flow leaves through its source GPU's NIC and enters through its
//     destination GPU's NIC; PCIe/NVLink hops to the NIC are not modelled.)
//   Link ids are dense, 0 .. link_count()-1, laid out as
//     [0, 2·gpus)                       NVLink egress (2g), ingress (2g+1)
//     [nic_base, nic_base + 2·nodes·R)  NIC egress, ingress of NIC (node·R + r)
//     [core_base, core_base + 2·nodes)  uplink (2·node), downlink (2·node + 1)
//   NIC and core links exist only when more than one node is in use. A straggling NIC
//   (spec::Cluster::straggler, kind nic) has 1/slowdown of the bandwidth both ways.
// References: NVIDIA DGX A100/H100 system architecture (NVSwitch, 8 rail-aligned HDR/NDR NICs);
// fat-tree taper as in Leiserson, "Fat-trees" (IEEE ToC 1985); link-level flow modelling as in
// SimGrid (Casanova et al., JPDC 2014).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/cluster.hpp"

namespace stagecraft::sim {

using LinkId = int32_t;

enum class LinkKind { kNvlinkEgress, kNvlinkIngress, kNicEgress, kNicIngress, kUplink, kDownlink };

std::string to_string(LinkKind kind);

struct Link {
  LinkKind kind = LinkKind::kNvlinkEgress;
  int64_t node = 0;      // node the link belongs to
  int64_t index = 0;     // GPU index (NVLink), NIC index within the node (NIC), or node (core)
  double bandwidth_Bps = 0;
};

struct Route {
  std::vector<LinkId> links;
  int64_t latency_ns = 0;
};

class Topology {
 public:
  // Builds the links for the first `gpus_in_use` GPUs of `cluster` (1 .. cluster.gpus()).
  // Throws std::invalid_argument naming the cluster and the offending value.
  Topology(const spec::Cluster& cluster, int64_t gpus_in_use);

  int64_t gpus() const { return gpus_; }
  int64_t nodes() const { return nodes_; }  // nodes in use: ceil(gpus / gpus_per_node)
  int64_t gpus_per_node() const { return gpus_per_node_; }
  int64_t nics_per_node() const { return nics_per_node_; }
  // Inline: the simulator asks for every send and collective member.
  int64_t node_of(int64_t gpu) const {
    check_gpu(gpu, "node_of");
    return gpu / gpus_per_node_;
  }
  int64_t local_index(int64_t gpu) const {
    check_gpu(gpu, "local_index");
    return gpu % gpus_per_node_;
  }
  int64_t nic_of(int64_t gpu) const;  // local_index % nics_per_node; needs more than one node

  int64_t intra_latency_ns() const { return intra_latency_ns_; }
  const spec::Nccl& nccl() const { return nccl_; }   // the collective library's version and facts
  int64_t inter_latency_ns() const { return inter_latency_ns_; }

  int32_t link_count() const { return static_cast<int32_t>(links_.size()); }
  const Link& link(LinkId id) const;
  const std::vector<Link>& links() const { return links_; }
  std::vector<double> capacities_Bps() const;
  std::string describe(LinkId id) const;  // e.g. "nic-egress(node 1, nic 0)"

  LinkId nvlink_egress(int64_t gpu) const;
  LinkId nvlink_ingress(int64_t gpu) const;
  LinkId nic_egress(int64_t node, int64_t nic) const;
  LinkId nic_ingress(int64_t node, int64_t nic) const;
  LinkId uplink(int64_t node) const;
  LinkId downlink(int64_t node) const;

  Route route(int64_t src_gpu, int64_t dst_gpu) const;
  // Allocation-free form: clears `links` and appends the route's links; returns its latency.
  int64_t route_into(int64_t src_gpu, int64_t dst_gpu, std::vector<LinkId>& links) const;
  int64_t latency_ns(int64_t src_gpu, int64_t dst_gpu) const;

 private:
  void check_gpu(int64_t gpu, const char* what) const {
    if (gpu < 0 || gpu >= gpus_) [[unlikely]] gpu_out_of_range(gpu, what);
  }
  [[noreturn]] void gpu_out_of_range(int64_t gpu, const char* what) const;
  void check_node(int64_t node, const char* what) const;

  std::string cluster_name_;
  int64_t gpus_ = 0;
  int64_t nodes_ = 0;
  int64_t gpus_per_node_ = 0;
  int64_t nics_per_node_ = 0;
  int64_t intra_latency_ns_ = 0;
  int64_t inter_latency_ns_ = 0;
  spec::Nccl nccl_;
  LinkId nic_base_ = 0;
  LinkId core_base_ = 0;
  std::vector<Link> links_;
};

}  // namespace stagecraft::sim
