// Link features: a communication sample's time written as a linear function of the link
// parameters the cluster profile holds, in the collective model's terms (sim/models/collectives.hpp):
//     t = A·α_intra + B/β_intra + C·α_inter + D/β_inter
// α_intra = intra_node.latency_ns, β_intra = intra_node.bandwidth_Bps, α_inter =
// inter_node.latency_ns, β_inter = inter_node.nic_bandwidth_Bps. For a collective, each ring stage
// of sim::collective_stages (over the group's GPUs on the topology) runs `steps` steps of
// α + chunk/β_step: α is the inter-node latency when a transfer of the step crosses nodes, else
// the intra-node one; β_step = min over links l of C_l/n_l (n_l transfers of the step share link
// l), and the bottleneck link's class (NVLink: intra; NIC, up- or downlink: inter) decides which
// bandwidth it scales with: C_l/n_l = ρ·β_class with ρ = 1/n_l for NVLink and NICs and
// ρ = R/(oversubscription·n_l) for the fat-tree core (R NICs per node). So a stage adds
//     steps to A or C   and   steps·chunk/ρ to B or D.
// A send (p2p) is one transfer: its route's latency and bottleneck. The gradient-norm all-reduce
// (a few bytes) is the collective model's latency-only tree (sim::gradnorm_tree_steps):
// A = its intra-node steps, C = its inter-node steps.
// ρ comes from the base profile's topology (which link is the bottleneck); a calibration that
// moves β_intra past β_inter·ρ would change it, which this linearisation does not follow.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/spec/cluster.hpp"
#include "sim/models/collectives.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::traces {

struct LinkFeatures {
  double a_intra = 0;   // α_intra multiplier (ring steps)
  double b_intra = 0;   // bytes at β_intra
  double a_inter = 0;
  double b_inter = 0;

  // Seconds for given parameters (latencies in seconds, bandwidths in bytes/s).
  double seconds(double alpha_intra_s, double beta_intra_Bps, double alpha_inter_s, double beta_inter_Bps) const;
};

class LinkModel {
 public:
  // The topology of `cluster` over its first `gpus` GPUs (nodes filled in order).
  LinkModel(const spec::Cluster& cluster, int64_t gpus);

  LinkFeatures collective(sim::CollectiveKind kind, int64_t bytes, std::span<const int64_t> gpus) const;
  LinkFeatures p2p(int64_t src_gpu, int64_t dst_gpu, int64_t bytes) const;
  LinkFeatures tree_latency(int64_t world) const;
  const sim::Topology& topology() const { return topology_; }

 private:
  struct Bottleneck {
    bool inter = false;   // the bottleneck link scales with β_inter
    double rho = 1.0;     // C_l / n_l = rho · β_class
  };
  Bottleneck bottleneck(const std::vector<std::pair<int64_t, int64_t>>& pairs) const;
  bool crosses_nodes(const std::vector<std::pair<int64_t, int64_t>>& pairs) const;

  spec::Cluster cluster_;
  sim::Topology topology_;
};

}  // namespace stagecraft::traces
