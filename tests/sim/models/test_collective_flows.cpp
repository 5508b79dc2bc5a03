// The one mapping from a collective to network flows (models/collective_flows.hpp): which GPU a
// member's flow goes to, how many bytes it carries, and that alone it takes the collective
// model's time T while a link shared with other traffic slows it down.
#include "sim/models/collective_flows.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "cluster_fixture.hpp"
#include "sim/network/flows.hpp"

namespace stagecraft::sim {
namespace {

using test::ClusterShape;
using test::make_cluster;

// Runs `flows` (src, dst, bytes, cap) from time 0 to the end; each flow's end time. A capped flow
// is a collective's (its latency is inside T, as the simulator starts it); an uncapped one a
// p2p send, active after its route's latency.
std::vector<int64_t> run(const Topology& topo, const std::vector<std::tuple<int64_t, int64_t, int64_t, double>>& flows) {
  FlowNetwork net(topo);
  std::vector<LinkId> path;
  std::vector<int64_t> ends(flows.size(), -1);
  for (const auto& [src, dst, bytes, cap] : flows) {
    const int64_t route_latency = topo.route_into(src, dst, path);
    net.start_flow(path, bytes, cap == kNoRateCap ? route_latency : 0, cap);
  }
  while (net.flow_count() > 0) {
    for (const FlowCompletion& c : net.advance_to(net.next_event_time_ns())) ends[static_cast<std::size_t>(c.id)] = c.time_ns;
  }
  return ends;
}

TEST(CollectiveFlows, InsideANodeTheFlowGoesToTheNextMemberForEveryStep) {
  // 4 GPUs of one node, a ring: member 2's successor is 3, carrying ⌈S·3/4⌉ bytes.
  const std::vector<int64_t> group{0, 1, 2, 3};
  const RingFlow f = ring_flow(group, 2, 4);
  EXPECT_EQ(f.successor, 3);
  EXPECT_EQ(f.parts, 4);
  EXPECT_EQ(f.share, 1);
  const int64_t S = 1'000'001;   // S·3/4 = 750000.75
  EXPECT_EQ(ring_flow_bytes(f, CollectiveKind::kAllGather, S), 750'001);
  EXPECT_EQ(ring_flow_bytes(f, CollectiveKind::kAllReduce, S), 2 * 750'001);  // RS then AG
  EXPECT_EQ(ring_flow(group, 3, 4).successor, 0);  // the ring closes
}

TEST(CollectiveFlows, AcrossNodesTheFlowIsTheMembersRail) {
  // 8 GPUs on 2 nodes of 4: member j's flow goes to j + 4 (n/N = 4 places on, through its NIC);
  // a node's crossing carries S·7/8 spread over its k = 4 members: ⌈800·7/8 / 4⌉ = 175.
  const std::vector<int64_t> group{0, 1, 2, 3, 4, 5, 6, 7};
  const RingFlow f = ring_flow(group, 1, 4);
  EXPECT_EQ(f.successor, 5);
  EXPECT_EQ(f.share, 4);
  EXPECT_EQ(ring_flow_bytes(f, CollectiveKind::kReduceScatter, 800), 175);
  EXPECT_EQ(ring_flow(group, 6, 4).successor, 2);
  EXPECT_THROW(ring_flow(group, 9, 4), std::invalid_argument);
}

TEST(CollectiveFlows, AloneAFlowTakesTheCollectiveTimeAndASharedNicSlowsIt) {
  // All-reduce over {0, 4} (one GPU on each of 2 nodes, NIC 0 of each): T from the collective
  // model; member 0's flow carries 2·⌈S·1/2⌉ = S bytes at cap S/T, so alone it ends at T
  // (to 1 ns of rounding). A p2p 2 -> 6 (local 2 leaves through NIC 2 mod 2 = 0) of X bytes
  // shares node 0's NIC 0 egress of capacity nic: max-min gives the capped flow min(cap, nic/2)
  // and the p2p the rest, so the collective now ends later than T.
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const std::vector<int64_t> group{0, 4};
  const int64_t S = 20'000'000;
  const int64_t T = CollectiveCost(CollectiveKind::kAllReduce, group, topo).time_ns(S);
  const RingFlow f = ring_flow(group, 0, 4);
  ASSERT_EQ(f.successor, 4);
  const int64_t bytes = ring_flow_bytes(f, CollectiveKind::kAllReduce, S);
  EXPECT_EQ(bytes, S);
  const double cap = ring_flow_cap_Bps(bytes, T);
  const std::vector<int64_t> alone = run(topo, {{0, 4, bytes, cap}});
  EXPECT_NEAR(static_cast<double>(alone[0]), static_cast<double>(T), 1.0);
  // The cap is below the NIC (T includes two latencies), and above half of it: sharing binds.
  ASSERT_LT(cap, shape.nic_Bps);
  ASSERT_GT(cap, shape.nic_Bps / 2);
  const std::vector<int64_t> shared = run(topo, {{0, 4, bytes, cap}, {2, 6, 50'000'000, kNoRateCap}});
  EXPECT_GT(shared[0], T + 1);
}

}  // namespace
}  // namespace stagecraft::sim
