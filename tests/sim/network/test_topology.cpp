// Topology: link layout, routes, capacities, and the effect of the fat-tree taper.
#include "sim/network/topology.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "sim/network/max_min.hpp"

namespace stagecraft::sim {
namespace {

using test::ClusterShape;
using test::make_cluster;

TEST(Topology, LinksOfTwoNodes) {
  // 2 nodes × 4 GPUs, 2 NICs per node: 8 GPUs · 2 NVLink directions + 2 nodes · 2 NICs · 2
  // directions + 2 nodes · (uplink + downlink).
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  EXPECT_EQ(topo.nodes(), 2);
  EXPECT_EQ(topo.link_count(), 8 * 2 + 2 * 2 * 2 + 2 * 2);
  EXPECT_DOUBLE_EQ(topo.link(topo.nvlink_egress(5)).bandwidth_Bps, shape.nvlink_Bps);
  EXPECT_DOUBLE_EQ(topo.link(topo.nic_ingress(1, 1)).bandwidth_Bps, shape.nic_Bps);
  // Core per node: nics_per_node · nic_bandwidth / oversubscription.
  EXPECT_DOUBLE_EQ(topo.link(topo.uplink(0)).bandwidth_Bps, 2 * shape.nic_Bps / shape.oversubscription);
  EXPECT_EQ(topo.link(topo.downlink(1)).kind, LinkKind::kDownlink);
  EXPECT_EQ(topo.describe(topo.nic_egress(1, 0)), "nic-egress(node 1, nic 0)");
  const std::vector<double> caps = topo.capacities_Bps();
  ASSERT_EQ(static_cast<int32_t>(caps.size()), topo.link_count());
  EXPECT_DOUBLE_EQ(caps[static_cast<std::size_t>(topo.uplink(1))], 2 * shape.nic_Bps);
}

TEST(Topology, RouteSameGpu) {
  const Topology topo(make_cluster(), 8);
  const Route r = topo.route(3, 3);
  EXPECT_TRUE(r.links.empty());
  EXPECT_EQ(r.latency_ns, 0);
}

TEST(Topology, RouteSameNode) {
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const Route r = topo.route(1, 3);  // both on node 0
  EXPECT_EQ(r.links, (std::vector<LinkId>{topo.nvlink_egress(1), topo.nvlink_ingress(3)}));
  EXPECT_EQ(r.latency_ns, shape.intra_latency_ns);
}

TEST(Topology, RouteCrossNodeIsRailAligned) {
  // GPU 1 = node 0, local 1 -> NIC 1 % 2 = 1; GPU 6 = node 1, local 2 -> NIC 2 % 2 = 0.
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  EXPECT_EQ(topo.nic_of(1), 1);
  EXPECT_EQ(topo.nic_of(6), 0);
  const Route r = topo.route(1, 6);
  EXPECT_EQ(r.links, (std::vector<LinkId>{topo.nic_egress(0, 1), topo.uplink(0), topo.downlink(1),
                                          topo.nic_ingress(1, 0)}));
  EXPECT_EQ(r.latency_ns, shape.inter_latency_ns);
  EXPECT_EQ(topo.latency_ns(6, 1), shape.inter_latency_ns);
}

TEST(Topology, FewerGpusThanTheCluster) {
  // 3 GPUs of a 2 × 4 cluster fit in node 0: NVLink links only.
  const Topology topo(make_cluster(), 3);
  EXPECT_EQ(topo.nodes(), 1);
  EXPECT_EQ(topo.link_count(), 3 * 2);
  EXPECT_EQ(topo.route(0, 2).links.size(), 2u);
  EXPECT_THROW(topo.route(0, 3), std::out_of_range);
  EXPECT_THROW(topo.uplink(0), std::out_of_range);
  // 5 GPUs: node 1 holds GPU 4 only, but it has NICs and core links.
  const Topology five(make_cluster(), 5);
  EXPECT_EQ(five.nodes(), 2);
  EXPECT_EQ(five.route(0, 4).links.size(), 4u);
}

TEST(Topology, RejectsImpossibleInputs) {
  EXPECT_THROW(Topology(make_cluster(), 0), std::invalid_argument);
  try {
    Topology(make_cluster(), 9);
    ADD_FAILURE() << "9 GPUs of 8 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hand-made"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 9"), std::string::npos) << e.what();
  }
  ClusterShape no_nics;
  no_nics.nics_per_node = 0;
  EXPECT_THROW(Topology(make_cluster(no_nics), 8), std::invalid_argument);
  EXPECT_NO_THROW(Topology(make_cluster(no_nics), 4));  // one node needs no NIC
  ClusterShape taper_below_one;
  taper_below_one.oversubscription = 0.5;
  EXPECT_THROW(Topology(make_cluster(taper_below_one), 8), std::invalid_argument);
}

// All 4 GPUs of node 0 send to their counterparts on node 1 at once.
//   oversubscription 1: NIC r carries GPUs r and r+2 -> 25e9 / 2 = 12.5e9 each; the uplink
//     (2 · 25e9 = 50e9) carries all 4 -> 12.5e9 each. Bottleneck 12.5e9 (NIC and core tie).
//   oversubscription 2: the uplink is 50e9 / 2 = 25e9 for 4 flows -> 6.25e9 each: halved.
std::vector<double> cross_node_rates(double oversubscription) {
  ClusterShape shape;
  shape.oversubscription = oversubscription;
  const Topology topo(make_cluster(shape), 8);
  std::vector<std::vector<LinkId>> paths;
  for (int64_t g = 0; g < 4; ++g) paths.push_back(topo.route(g, g + 4).links);
  return max_min_rates(topo.capacities_Bps(), paths);
}

TEST(Topology, OversubscriptionTwoHalvesTheCrossNodeBottleneck) {
  const ClusterShape shape;
  const std::vector<double> full = cross_node_rates(1.0);
  const std::vector<double> tapered = cross_node_rates(2.0);
  for (std::size_t f = 0; f < 4; ++f) {
    EXPECT_DOUBLE_EQ(full[f], shape.nic_Bps / 2) << "flow " << f;
    EXPECT_DOUBLE_EQ(tapered[f], full[f] / 2) << "flow " << f;
  }
}

}  // namespace
}  // namespace stagecraft::sim
