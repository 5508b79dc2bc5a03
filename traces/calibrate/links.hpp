// Link features: a communication sample's time written as a linear function of the link
// parameters the cluster profile holds, in the collective model's terms (sim/models/collectives.hpp):
//     t = fixed + A·α_intra + B/β_intra + C·α_inter + D/β_inter
// α_intra = intra_node.latency_ns, β_intra = intra_node.bandwidth_Bps, α_inter =
// inter_node.latency_ns, β_inter = inter_node.nic_bandwidth_Bps.
// A collective is NCCL's model (sim/models/nccl.hpp) at the sample's size: its latency is the NCCL
// version's table, a constant (`fixed`); its bandwidth term is S / alg_bw with alg_bw = f·B, f the
// chosen protocol's fraction of the group's bus bandwidth B, and B = ρ·β_class for the class that
// bounds it (NVLink: ρ = 1; network: ρ = the NICs the node's members use, or R/oversubscription
// for the uplink). So a collective adds S/(f·ρ) to B or D, or, when a constant cap (LL's llMaxBw)
// bounds the protocol, S/alg_bw to `fixed`. The gradient-norm all-reduce is the same at its size.
// A send (p2p) is one transfer: its route's latency (A or C += 1) and bottleneck.
// ρ, f and the protocol come from the base profile; a calibration that moves β_intra past
// β_inter·ρ, or changes NCCL's protocol choice, would change them, which this linearisation does
// not follow.
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
  double fixed_s = 0;   // seconds that no link parameter scales (NCCL's latency table)
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
  LinkFeatures gradnorm_allreduce(int64_t world) const;
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
