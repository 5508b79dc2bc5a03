// Collective model: ring formulas written as equations, hierarchical phase sums derived by hand,
// phases on the FlowNetwork agreeing with the analytic time, and contention with p2p traffic.
// Each ring step rounds its transfer up to a whole ns, so a closed form over `steps` steps may
// differ from the model by less than `steps` ns (EXPECT_NEAR with that bound).
#include "sim/models/collectives.hpp"

#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "models/ring_phases.hpp"
#include "sim/network/flows.hpp"

namespace stagecraft::sim {
namespace {

using test::ClusterShape;
using test::make_cluster;
using test::collective_phases;
using test::Phase;
using test::simulate_phases_ns;
using test::Transfer;

std::vector<int64_t> iota_gpus(int64_t first, int64_t count) {
  std::vector<int64_t> v;
  for (int64_t g = first; g < first + count; ++g) v.push_back(g);
  return v;
}

TEST(Collectives, RingAllGatherInOneNode) {
  // n GPUs of one node on NVLink: (n−1)·α + (n−1)/n · S/β.
  ClusterShape shape;
  shape.nodes = 1;
  shape.gpus_per_node = 8;
  const Topology topo(make_cluster(shape), 8);
  const int64_t S = 800'000'000;
  for (int64_t n : {2, 4, 8}) {
    const std::vector<int64_t> group = iota_gpus(0, n);
    const double alpha = static_cast<double>(shape.intra_latency_ns), beta = shape.nvlink_Bps;
    const double nd = static_cast<double>(n);
    const double expected_ns = (nd - 1) * alpha + (nd - 1) / nd * static_cast<double>(S) / beta * 1e9;
    const int64_t t = collective_time_ns(CollectiveKind::kAllGather, S, group, topo);
    EXPECT_NEAR(static_cast<double>(t), expected_ns, nd - 1) << "n = " << n;
    EXPECT_EQ(collective_time_ns(CollectiveKind::kReduceScatter, S, group, topo), t) << "n = " << n;
  }
}

TEST(Collectives, RingAllReduceIsTwiceAllGather) {
  ClusterShape shape;
  shape.nodes = 1;
  shape.gpus_per_node = 8;
  const Topology topo(make_cluster(shape), 8);
  const int64_t S = 123'456'000;
  const std::vector<int64_t> group = iota_gpus(0, 8);
  const double alpha = static_cast<double>(shape.intra_latency_ns), beta = shape.nvlink_Bps, n = 8;
  const double expected_ns = 2 * ((n - 1) * alpha + (n - 1) / n * static_cast<double>(S) / beta * 1e9);
  const int64_t ar = collective_time_ns(CollectiveKind::kAllReduce, S, group, topo);
  EXPECT_NEAR(static_cast<double>(ar), expected_ns, 2 * (n - 1));
  EXPECT_EQ(ar, 2 * collective_time_ns(CollectiveKind::kAllGather, S, group, topo));
}

TEST(Collectives, BusBandwidthOfAnInNodeRingIsTheLinkBandwidth) {
  // With α = 0, busbw (nccl-tests) of a ring equals the per-GPU link bandwidth β:
  //   AG: t = (n−1)/n · S/β,  busbw = S/t · (n−1)/n = β;  AR: t = 2(n−1)/n · S/β, F = 2(n−1)/n.
  ClusterShape shape;
  shape.nodes = 1;
  shape.gpus_per_node = 8;
  shape.intra_latency_ns = 0;
  const Topology topo(make_cluster(shape), 8);
  const int64_t S = 800'000'000;
  const std::vector<int64_t> group = iota_gpus(0, 8);
  for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
    const int64_t t = collective_time_ns(kind, S, group, topo);
    EXPECT_NEAR(busbw_Bps(kind, S, 8, t), shape.nvlink_Bps, shape.nvlink_Bps * 1e-9) << to_string(kind);
  }
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::kAllReduce, 4), 2.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::kAllGather, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(algbw_Bps(1'000, 1'000), 1e9);
}

// 2 nodes × 4 GPUs, 2 NICs per node, all 8 GPUs in the group (N = 2 nodes, k = 4 per node):
//   intra RS and intra AG: k−1 = 3 steps each of S/k over NVLink (each GPU one egress flow): β_nv.
//   inter RS and inter AG: N−1 = 1 step each of S/(kN); 4 rails per node, NIC r carries rails r
//     and r+2 -> nic/2; the uplink (2·nic) carries 4 flows -> nic/2. β_rail = nic/2.
//   t = 2·(k−1)·(α_intra + (S/k)/β_nv) + 2·(N−1)·(α_inter + (S/(kN))/β_rail)
TEST(Collectives, HierarchicalAllReduceOverTwoNodes) {
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const int64_t S = 400'000'000;
  const double k = 4, N = 2, Sd = static_cast<double>(S);
  const double a_intra = static_cast<double>(shape.intra_latency_ns);
  const double a_inter = static_cast<double>(shape.inter_latency_ns);
  const double beta_nv = shape.nvlink_Bps, beta_rail = shape.nic_Bps / 2;
  const double expected_ns = 2 * (k - 1) * (a_intra + Sd / k / beta_nv * 1e9) +
                             2 * (N - 1) * (a_inter + Sd / (k * N) / beta_rail * 1e9);
  const std::vector<int64_t> group = iota_gpus(0, 8);
  const int64_t t = collective_time_ns(CollectiveKind::kAllReduce, S, group, topo);
  EXPECT_NEAR(static_cast<double>(t), expected_ns, 2 * (k - 1) + 2 * (N - 1));

  const std::vector<Phase> phases = collective_phases(CollectiveKind::kAllReduce, S, group, topo);
  ASSERT_EQ(phases.size(), static_cast<std::size_t>(2 * (k - 1) + 2 * (N - 1)));
  // Order: 3 intra RS, 1 inter RS, 1 inter AG, 3 intra AG; every phase moves one chunk per GPU.
  for (std::size_t p = 0; p < phases.size(); ++p) {
    const bool inter = p == 3 || p == 4;
    EXPECT_EQ(phases[p].transfers.size(), 8u) << "phase " << p;
    EXPECT_EQ(phases[p].latency_ns, inter ? shape.inter_latency_ns : shape.intra_latency_ns) << "phase " << p;
    for (const Transfer& tr : phases[p].transfers) {
      EXPECT_EQ(tr.bytes, inter ? S / 8 : S / 4) << "phase " << p;
      EXPECT_EQ(topo.node_of(tr.src_gpu) != topo.node_of(tr.dst_gpu), inter) << "phase " << p;
      if (inter) {
        EXPECT_EQ(topo.local_index(tr.src_gpu), topo.local_index(tr.dst_gpu)) << "rail-aligned";
      }
    }
  }
  EXPECT_EQ(simulate_phases_ns(phases, topo), t);
}

TEST(Collectives, HierarchicalReduceScatterAndAllGatherAreHalves) {
  const Topology topo(make_cluster(), 8);
  const int64_t S = 400'000'000;
  const std::vector<int64_t> group = iota_gpus(0, 8);
  const int64_t ar = collective_time_ns(CollectiveKind::kAllReduce, S, group, topo);
  const int64_t rs = collective_time_ns(CollectiveKind::kReduceScatter, S, group, topo);
  const int64_t ag = collective_time_ns(CollectiveKind::kAllGather, S, group, topo);
  EXPECT_EQ(rs, ag);
  EXPECT_EQ(rs + ag, ar);
}

TEST(Collectives, OversubscriptionTwoHalvesTheInterNodeStepBandwidth) {
  // All 8 GPUs of 2 × 4 (hierarchical): only the two inter-node steps (RS, AG of S/(kN) = S/8)
  // cross the core. β_rail: oversubscription 1 -> nic/2 (NIC and uplink tie); oversubscription
  // 2 -> uplink (2·nic/2) shared by 4 rails = nic/4: half, so each inter step's transfer doubles.
  ClusterShape tapered;
  tapered.oversubscription = 2;
  const Topology full_topo(make_cluster(), 8), tapered_topo(make_cluster(tapered), 8);
  const int64_t S = 400'000'000;
  const std::vector<int64_t> group = iota_gpus(0, 8);
  const auto full = collective_stages(CollectiveKind::kAllReduce, S, group, full_topo);
  ASSERT_EQ(full.size(), 4u);
  // Inter-node stage time with and without the taper, latency excluded: S/(kN) / β_rail.
  const int64_t full_ns = collective_time_ns(CollectiveKind::kAllReduce, S, group, full_topo);
  const int64_t tapered_ns = collective_time_ns(CollectiveKind::kAllReduce, S, group, tapered_topo);
  const double inter_transfer_ns = static_cast<double>(S) / 8 / (make_cluster().inter_node.nic_bandwidth_Bps / 2) * 1e9;
  // Two inter-node steps (RS + AG), each twice as long: the difference is 2 · inter_transfer_ns.
  EXPECT_NEAR(static_cast<double>(tapered_ns - full_ns), 2 * inter_transfer_ns, 2);
}

TEST(Collectives, SendRecvIsOneTransfer) {
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const int64_t S = 50'000'000;
  const std::vector<int64_t> same_node{1, 2}, cross_node{1, 6};
  EXPECT_NEAR(static_cast<double>(collective_time_ns(CollectiveKind::kSendRecv, S, same_node, topo)),
              static_cast<double>(shape.intra_latency_ns) + static_cast<double>(S) / shape.nvlink_Bps * 1e9, 1);
  EXPECT_NEAR(static_cast<double>(collective_time_ns(CollectiveKind::kSendRecv, S, cross_node, topo)),
              static_cast<double>(shape.inter_latency_ns) + static_cast<double>(S) / shape.nic_Bps * 1e9, 1);
  const std::vector<Phase> phases = collective_phases(CollectiveKind::kSendRecv, S, cross_node, topo);
  ASSERT_EQ(phases.size(), 1u);
  ASSERT_EQ(phases[0].transfers.size(), 1u);
  EXPECT_EQ(phases[0].transfers[0].src_gpu, 1);
  EXPECT_EQ(phases[0].transfers[0].dst_gpu, 6);
  EXPECT_EQ(phases[0].transfers[0].bytes, S);
}

// On an idle network the phases take exactly the analytic time, for every kind and placement
// shape: in-node, rails only (k = 1), hierarchical, uneven (flat ring), scattered order.
TEST(Collectives, PhasesOnTheFlowNetworkMatchTheAnalyticTime) {
  ClusterShape shape;
  shape.nodes = 4;
  const Topology topo(make_cluster(shape), 16);
  const std::vector<std::vector<int64_t>> groups{
      {0, 1, 2, 3}, {0, 4, 8, 12}, iota_gpus(0, 16), {0, 1, 2, 5}, {13, 2, 7, 8, 3, 12, 6, 9}, {5, 3}};
  for (const auto& group : groups) {
    for (CollectiveKind kind :
         {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
      for (int64_t S : {int64_t{0}, int64_t{1000}, int64_t{123'456'789}}) {
        const int64_t analytic = collective_time_ns(kind, S, group, topo);
        const std::vector<Phase> phases = collective_phases(kind, S, group, topo);
        EXPECT_EQ(simulate_phases_ns(phases, topo), analytic)
            << to_string(kind) << " of " << S << " bytes over " << group.size() << " GPUs starting at " << group[0];
      }
    }
  }
}

// The planner evaluates plans from many threads, each with its own Topology and FlowNetwork; no
// hidden shared state may make results depend on that.
TEST(Collectives, ThreadsGetTheSameAnswersAsOneThread) {
  ClusterShape shape;
  shape.nodes = 4;
  const spec::Cluster cluster = make_cluster(shape);
  auto evaluate = [&cluster](int64_t seed) {
    const Topology topo(cluster, 16);
    const std::vector<int64_t> group{13, 2, 7, 8, 3, 12, 6, 9};
    const int64_t S = 1'000'003 * (seed + 1);
    return collective_time_ns(CollectiveKind::kAllReduce, S, group, topo) +
           simulate_phases_ns(collective_phases(CollectiveKind::kAllGather, S, group, topo), topo);
  };
  std::vector<int64_t> serial, parallel(8);
  for (int64_t i = 0; i < 8; ++i) serial.push_back(evaluate(i));
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < 8; ++i) threads.emplace_back([&, i] { parallel[static_cast<std::size_t>(i)] = evaluate(i); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(parallel, serial);
}

TEST(Collectives, PrecomputedCostAnswersEverySize) {
  ClusterShape shape;
  shape.nodes = 4;
  const Topology topo(make_cluster(shape), 16);
  const std::vector<int64_t> group = iota_gpus(0, 16);
  const CollectiveCost cost(CollectiveKind::kAllReduce, group, topo);
  EXPECT_EQ(cost.group_size(), 16);
  for (int64_t S : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{50'000'000}, int64_t{1} << 33}) {
    EXPECT_EQ(cost.time_ns(S), collective_time_ns(CollectiveKind::kAllReduce, S, group, topo)) << S;
  }
  // Larger buffers never take less time.
  EXPECT_LT(cost.time_ns(1'000'000), cost.time_ns(2'000'000));
  EXPECT_THROW(cost.time_ns(-1), std::invalid_argument);
}

TEST(Collectives, GroupOfOneCostsNothing) {
  const Topology topo(make_cluster(), 8);
  const std::vector<int64_t> one{3};
  EXPECT_EQ(collective_time_ns(CollectiveKind::kAllReduce, 1'000'000, one, topo), 0);
  EXPECT_TRUE(collective_phases(CollectiveKind::kAllReduce, 1'000'000, one, topo).empty());
}

TEST(Collectives, RejectsBadPlacements) {
  const Topology topo(make_cluster(), 8);
  const std::vector<int64_t> duplicate{0, 1, 1}, outside{0, 8}, empty{}, three{0, 1, 2};
  EXPECT_THROW(collective_time_ns(CollectiveKind::kAllGather, 100, duplicate, topo), std::invalid_argument);
  EXPECT_THROW(collective_time_ns(CollectiveKind::kAllGather, 100, outside, topo), std::invalid_argument);
  EXPECT_THROW(collective_time_ns(CollectiveKind::kAllGather, 100, empty, topo), std::invalid_argument);
  EXPECT_THROW(collective_time_ns(CollectiveKind::kSendRecv, 100, three, topo), std::invalid_argument);
  EXPECT_THROW(collective_time_ns(CollectiveKind::kAllGather, -1, three, topo), std::invalid_argument);
}

// A collective's phases and a pipeline p2p flow on one FlowNetwork, as the simulator will run
// them: the next phase starts when every transfer of the current one has finished.
struct Contended {
  int64_t collective_end_ns = 0;
  int64_t p2p_end_ns = 0;
};

Contended run_with_p2p(const Topology& topo, const std::vector<Phase>& phases, int64_t p2p_src, int64_t p2p_dst,
                       int64_t p2p_bytes) {
  FlowNetwork net(topo);
  const Route p2p_route = topo.route(p2p_src, p2p_dst);
  const FlowId p2p = net.start_flow(p2p_route.links, p2p_bytes, p2p_route.latency_ns);
  std::size_t next_phase = 0;
  int64_t outstanding = 0;
  auto start_phase = [&] {
    for (const Transfer& t : phases[next_phase].transfers) {
      net.start_flow(topo.route(t.src_gpu, t.dst_gpu).links, t.bytes, phases[next_phase].latency_ns);
      ++outstanding;
    }
    ++next_phase;
  };
  start_phase();
  Contended out;
  while (net.flow_count() > 0) {
    for (const FlowCompletion& c : net.advance_to(net.next_event_time_ns())) {
      if (c.id == p2p) {
        out.p2p_end_ns = c.time_ns;
      } else if (--outstanding == 0) {
        out.collective_end_ns = c.time_ns;
        if (next_phase < phases.size()) start_phase();
      }
    }
  }
  return out;
}

TEST(Collectives, PipelineP2pAndAllGatherSharingANicSlowEachOtherDown) {
  // All-gather over {0, 4} (one GPU per node: a 2-member ring across nodes, one step, each sends
  // X = S/2 bytes): 0->4 leaves node 0 through NIC 0. The p2p 2->6 (local 2 -> NIC 2 % 2 = 0)
  // also leaves through node 0's NIC 0. Both start after α_inter and carry X bytes.
  //   alone:    collective α + X/nic,   p2p α + X/nic
  //   together: 0->4 and 2->6 share NIC 0 egress at nic/2 each (4->0 alone at nic, but the
  //             step waits for 0->4): both end at α + X/(nic/2).
  const ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const int64_t X = 10'000'000, S = 2 * X;
  const std::vector<int64_t> group{0, 4};
  const std::vector<Phase> phases = collective_phases(CollectiveKind::kAllGather, S, group, topo);
  const double alpha = static_cast<double>(shape.inter_latency_ns), nic = shape.nic_Bps;

  const int64_t collective_alone = simulate_phases_ns(phases, topo);
  const Route p2p_route = topo.route(2, 6);
  const int64_t p2p_alone = simulate_phases_ns(std::vector<Phase>{{{{2, 6, X}}, p2p_route.latency_ns}}, topo);
  EXPECT_NEAR(static_cast<double>(collective_alone), alpha + static_cast<double>(X) / nic * 1e9, 1);
  EXPECT_NEAR(static_cast<double>(p2p_alone), alpha + static_cast<double>(X) / nic * 1e9, 1);

  const Contended together = run_with_p2p(topo, phases, 2, 6, X);
  EXPECT_GT(together.collective_end_ns, collective_alone);
  EXPECT_GT(together.p2p_end_ns, p2p_alone);
  EXPECT_NEAR(static_cast<double>(together.collective_end_ns), alpha + static_cast<double>(X) / (nic / 2) * 1e9, 1);
  EXPECT_NEAR(static_cast<double>(together.p2p_end_ns), alpha + static_cast<double>(X) / (nic / 2) * 1e9, 1);

  // A p2p on the other rail (1 -> 5 uses NIC 1) does not touch NIC 0: no slowdown.
  const Contended other_rail = run_with_p2p(topo, phases, 1, 5, X);
  EXPECT_EQ(other_rail.collective_end_ns, collective_alone);
}

}  // namespace
}  // namespace stagecraft::sim
