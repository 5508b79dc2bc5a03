// A hand-made cluster for the simulator tests, built field by field so that no test depends on
// a config file. Round numbers keep the hand derivations in the tests readable.
#pragma once

#include <cstdint>
#include <string>

#include "core/spec/cluster.hpp"

namespace stagecraft::test {

struct ClusterShape {
  int64_t nodes = 2;
  int64_t gpus_per_node = 4;
  int64_t nics_per_node = 2;
  double nvlink_Bps = 100e9;     // β inside a node, per GPU per direction
  int64_t intra_latency_ns = 1000;
  double nic_Bps = 25e9;         // per NIC per direction
  int64_t inter_latency_ns = 5000;
  double oversubscription = 1.0;
};

inline spec::Cluster make_cluster(const ClusterShape& s = {}) {
  spec::Cluster c;
  c.name = std::string("hand-made");
  c.nodes = s.nodes;
  c.gpus_per_node = s.gpus_per_node;
  c.gpu.name = std::string("G");  // move-assign: sidesteps a GCC 12 -Wrestrict false positive
  c.gpu.memory_bytes = int64_t{80} << 30;
  c.gpu.hbm_Bps = 2e12;
  c.intra_node.bandwidth_Bps = s.nvlink_Bps;
  c.intra_node.latency_ns = s.intra_latency_ns;
  c.inter_node.nics_per_node = s.nics_per_node;
  c.inter_node.nic_bandwidth_Bps = s.nic_Bps;
  c.inter_node.latency_ns = s.inter_latency_ns;
  c.inter_node.oversubscription = s.oversubscription;
  return c;
}

// A GPU whose GEMMs all run at exactly peak (1e14 FLOP/s bf16) and whose memory-bound work is
// free, so compute time is FLOPs / peak; one NIC per GPU.
inline spec::Cluster ideal_cluster(int64_t nodes, int64_t gpus_per_node) {
  ClusterShape shape;
  shape.nodes = nodes;
  shape.gpus_per_node = gpus_per_node;
  shape.nics_per_node = gpus_per_node;
  spec::Cluster c = make_cluster(shape);
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e14;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.hbm_Bps = 1e30;
  c.host.pcie_Bps = 25e9;
  c.host.adam_params_per_s = 1e9;
  c.host.memory_bytes = int64_t{1} << 40;
  return c;
}

// One node of `gpus` GPUs joined by NVLink of `nvlink_Bps`, GEMMs at exactly `peak` FLOP/s (bf16),
// memory for anything: collectives that take visible time beside computes that take known time.
inline spec::Cluster slow_link_node(int64_t gpus, double nvlink_Bps, double peak) {
  ClusterShape shape;
  shape.nodes = 1;
  shape.gpus_per_node = gpus;
  shape.nvlink_Bps = nvlink_Bps;
  spec::Cluster c = make_cluster(shape);
  c.gpu.peak_flops[spec::Dtype::kBf16] = peak;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.memory_bytes = int64_t{1} << 40;
  return c;
}

}  // namespace stagecraft::test
