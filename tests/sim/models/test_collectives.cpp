// Collective model: NCCL's cost model (models/nccl.hpp) over a group's bus bandwidth
// (collectives.hpp), derived by hand for one, two and three nodes, with the protocol NCCL picks at
// small and large sizes, the version table, and a send on its own.
// The fixture cluster: 4 GPUs per node at 100 GB/s NVLink, 2 NICs of 25 GB/s per node, NCCL's
// default settings (2.30: Intel host, Ampere, 16 channels). Times in µs below; the model rounds
// the total up to a whole ns, hence EXPECT_NEAR within 1 ns.
#include "sim/models/collectives.hpp"

#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "sim/models/nccl.hpp"

namespace stagecraft::sim {
namespace {

using test::ClusterShape;
using test::make_cluster;

std::vector<int64_t> iota_gpus(int64_t first, int64_t count) {
  std::vector<int64_t> v;
  for (int64_t g = first; g < first + count; ++g) v.push_back(g);
  return v;
}

double us(int64_t ns) { return static_cast<double>(ns) * 1e-3; }
constexpr double kOneNs = 1.0001e-3;   // µs: the model rounds the total up to a whole ns

TEST(Collectives, RingAllGatherInOneNodeAndTheProtocolByHand) {
  // n = 4 on one node, B = 100 GB/s, all-gather (nsteps 3, algBw = busBw·4/3), NCCL 2.30:
  //   LL:     busBw min(llMaxBw[Ampere][N1] = 87.7, 100·0.5) = 50,  lat 6.6 + 3·0.6  =  8.4 µs
  //   LL128:  busBw min(0.92·100, 16·20) = 92,                       lat 14.0 + 3·1.9 = 19.7 µs
  //   Simple: busBw 100,                                             lat 8.4 + 3·3.4  = 18.6 µs
  // LL and Simple cross where S·(3/4)·(1/50 − 1/100) ns/B = 10.2 µs: S = 1.36 MB.
  const Topology topo(make_cluster(), 8);
  const std::vector<int64_t> group{0, 1, 2, 3};
  const CollectiveCost cost(CollectiveKind::kAllGather, group, topo);
  EXPECT_DOUBLE_EQ(cost.bus().Bps, 100e9);
  EXPECT_FALSE(cost.bus().network);
  const auto ll = [](double S) { return 8.4 + S * 0.75 / 50e3; };      // µs: S bytes at 50 GB/s = S/50e3 µs
  const auto simple = [](double S) { return 18.6 + S * 0.75 / 100e3; };
  for (int64_t S : {int64_t{4096}, int64_t{1'000'000}}) {
    EXPECT_EQ(cost.choose(S).proto, NcclProto::kLL) << S;
    EXPECT_NEAR(us(cost.time_ns(S)), ll(static_cast<double>(S)), kOneNs) << S;
  }
  for (int64_t S : {int64_t{2'000'000}, int64_t{1'000'000'000}}) {
    EXPECT_EQ(cost.choose(S).proto, NcclProto::kSimple) << S;
    EXPECT_EQ(cost.choose(S).algo, NcclAlgo::kRing);
    EXPECT_NEAR(us(cost.time_ns(S)), simple(static_cast<double>(S)), kOneNs) << S;
  }
  // the same bytes and latency for a reduce-scatter
  EXPECT_EQ(CollectiveCost(CollectiveKind::kReduceScatter, group, topo).time_ns(1'000'000'000), cost.time_ns(1'000'000'000));
}

TEST(Collectives, AllToAllIsPointToPointOverOneNicPerGpuByHand) {
  // NCCL 2.30's Simple latencies (µs): baseLat[Ring] 8.4, one hop: NVLink 3.4, network 14.0.
  // One node, n = k = 4: S·(k − 1)/n = 3/4 of S over a member's NVLink egress, 100 GB/s.
  const Topology one(make_cluster(), 8);
  const CollectiveCost local(CollectiveKind::kAllToAll, std::vector<int64_t>{0, 1, 2, 3}, one);
  const int64_t S = 4'000'000;
  EXPECT_FALSE(local.bus().network);
  EXPECT_NEAR(us(local.time_ns(S)), 8.4 + 3.4 + 4e6 * 0.75 / 100e3, kOneNs);
  // One member on each of 3 nodes (GPU 0 of each, NIC 0 of 25 GB/s alone): 2/3 of S leaves through it.
  ClusterShape three;
  three.nodes = 3;
  const Topology topo3(make_cluster(three), 12);
  const CollectiveCost cross(CollectiveKind::kAllToAll, std::vector<int64_t>{0, 4, 8}, topo3);
  EXPECT_TRUE(cross.bus().network);
  EXPECT_DOUBLE_EQ(cross.bus().Bps, 25e9);
  EXPECT_NEAR(us(cross.time_ns(S)), 8.4 + 14.0 + 4e6 * (2.0 / 3.0) / 25e3, kOneNs);
  // All 8 GPUs of 2 nodes: k = 4, each member sends (8 − 4)/8 = 1/2 of S to the other node through
  // its NIC, which it shares with one other member of its node (local index mod 2): 12.5 GB/s —
  // unlike a ring, which spreads a node's crossing over both NICs — and 3/8 over NVLink at the same
  // time, which takes less: 0.5/12.5 > 0.375/100.
  const CollectiveCost all(CollectiveKind::kAllToAll, iota_gpus(0, 8), one);
  EXPECT_DOUBLE_EQ(all.bus().Bps, 12.5e9);
  EXPECT_NEAR(us(all.time_ns(S)), 8.4 + 14.0 + 4e6 * 0.5 / 12.5e3, kOneNs);
  // nccl-tests' bus bandwidth factor, as all-gather's
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::kAllToAll, 8), 7.0 / 8.0);
  EXPECT_EQ(all.time_ns(0), 0);
}

TEST(Collectives, ThreeNodeRingAllGatherByHand) {
  // 12 GPUs on 3 nodes of 4 (k = 4), each node's members leave through NICs {0, 1}:
  //   B = min(NVLink 100, NICs 2·25 = 50, uplink 2·25/1 = 50) = 50 GB/s, network-bound (ρ = 2).
  // Simple: lat = 8.4 + (12 − 3)·max(3.4, netOverhead 1·3) + (3 − 1)·14.0 = 67.0 µs,
  //         bandwidth S·(11/12)/50 GB/s; S = 120 MB: 2200 µs. LL128: lat 14 + 9·1.9 + 2·4.0 = 39.1,
  //         S·(11/12)/46 = 2391.3 µs: slower. So t = 2267.0 µs.
  ClusterShape shape;
  shape.nodes = 3;
  const Topology topo(make_cluster(shape), 12);
  const CollectiveCost cost(CollectiveKind::kAllGather, iota_gpus(0, 12), topo);
  EXPECT_DOUBLE_EQ(cost.bus().Bps, 50e9);
  EXPECT_TRUE(cost.bus().network);
  EXPECT_DOUBLE_EQ(cost.bus().rho, 2.0);
  const int64_t S = 120'000'000;
  EXPECT_EQ(cost.choose(S).proto, NcclProto::kSimple);
  EXPECT_NEAR(us(cost.time_ns(S)), 67.0 + 120e6 * 11.0 / 12.0 / 50e3, kOneNs);
}

TEST(Collectives, TwoNodeAllReduceIsARingWithThePlateauByHand) {
  // 8 GPUs on 2 nodes, B = 50 GB/s, all-reduce of S = 80 MB (nsteps 14, nInter 2):
  //   Ring Simple: lat = 8.4 + (14 − 2)·3.4 + 2·14.0 = 77.2 µs, ×1.4 (plateau: S/(16·8) ≥ 64) =
  //                108.08 µs; algBw = 50·8/14 GB/s: 80e6·14/8/50e3 = 2800 µs  -> 2908.08 µs
  //   Ring LL128:  lat 14 + 12·1.9 + 2·4.0 = 44.8, algBw 46·8/14: 3043.5 µs   -> 3088.3
  //   Tree Simple: busBw min(0.92·50, 16·23.6) = 46, × correction[Simple][⌊log2(80e6/64)⌋ = 20]
  //                = 0.8, algBw ×0.5 = 18.4 GB/s: 4347.8 µs                     -> slower
  const Topology topo(make_cluster(), 8);
  const CollectiveCost cost(CollectiveKind::kAllReduce, iota_gpus(0, 8), topo);
  const int64_t S = 80'000'000;
  const NcclChoice c = cost.choose(S);
  EXPECT_EQ(c.algo, NcclAlgo::kRing);
  EXPECT_EQ(c.proto, NcclProto::kSimple);
  EXPECT_NEAR(c.latency_s * 1e6, 77.2 * 1.4, 1e-9);
  EXPECT_NEAR(us(cost.time_ns(S)), 77.2 * 1.4 + 80e6 * 14.0 / 8.0 / 50e3, kOneNs);
}

TEST(Collectives, OneGpuPerNodeUsesTheTreeLatencyAndPat) {
  // {0, 4, 8}: one GPU per node (ppn = 1) on 3 nodes, each through its NIC 0: B = 25 GB/s.
  //   large S = 30 MB, Ring Simple: lat 8.4 + 2·14 (Tree's Net latency at ppn 1) = 36.4 µs,
  //     algBw 25·3/2 = 37.5 GB/s: 800 µs -> 836.4 µs; PAT: 8.0 + ⌊log2 3⌋·14/3.5 + 3·2.8 = 20.4 µs
  //     at 0.75·25 GB/s: 1600 µs -> slower.
  //   small S = 1000 B, Ring LL: busBw min(llMaxBw[Intel][N>2] = 20.4, 0.5·25) = 12.5, algBw 18.75;
  //     lat 6.6 + 2·5.0 = 16.6 µs -> 16.653 µs; PAT 20.453 µs -> LL.
  ClusterShape shape;
  shape.nodes = 3;
  const Topology topo(make_cluster(shape), 12);
  const std::vector<int64_t> group{0, 4, 8};
  const CollectiveCost cost(CollectiveKind::kAllGather, group, topo);
  EXPECT_DOUBLE_EQ(cost.bus().Bps, 25e9);
  EXPECT_NEAR(us(cost.time_ns(30'000'000)), 36.4 + 30e6 * 2.0 / 3.0 / 25e3, kOneNs);
  EXPECT_EQ(cost.choose(1000).proto, NcclProto::kLL);
  EXPECT_NEAR(us(cost.time_ns(1000)), 16.6 + 1000.0 / 18.75e3, kOneNs);
  // LL has PAT's bandwidth here and less latency, so PAT never wins on 3 nodes. On 64 nodes of
  // one rank, S = 1 MB, B = 25 GB/s it does:
  //   PAT:     8.0 + ⌊log2 64⌋·14/3.5 + 64·2.8 = 211.2 µs + 1e6/18.75e3 = 264.53 µs
  //   Ring LL: 6.6 + 63·5.0 = 321.6 µs + 1e6·63/64/12.5e3 = 400.35 µs; LL128 and Simple slower.
  const NcclModel wide(CollectiveKind::kAllGather, NcclGroup{64, 64, 25e9}, spec::Nccl{});
  EXPECT_EQ(wide.choose(1'000'000).algo, NcclAlgo::kPat);
  EXPECT_NEAR(us(wide.time_ns(1'000'000)), 211.2 + 1e6 / 18.75e3, kOneNs);
}

TEST(Collectives, RingLatencyIsLinearInRanksAtFixedNodes) {
  // N = 4 nodes, n = 8, 16, 32, 64 ranks (2 .. 16 per node), a size where Simple wins:
  //   lat(n) = 8.4 + (n − 4)·max(3.4, 3.0) + 3·14.0 µs  — slope 3.4 µs per rank, not per node.
  for (int64_t n : {8, 16, 32, 64}) {
    const NcclModel m(CollectiveKind::kAllGather, NcclGroup{n, 4, 100e9}, spec::Nccl{});
    const NcclChoice c = m.choose(int64_t{4} << 30);
    ASSERT_EQ(c.proto, NcclProto::kSimple) << n;
    EXPECT_NEAR(c.latency_s * 1e6, 8.4 + static_cast<double>(n - 4) * 3.4 + 3 * 14.0, 1e-9) << n;
  }
}

TEST(Collectives, LatencyScaleMultipliesTheTablesLatency) {
  // nccl.latency_scale 1.5 on the case above (n = 16 on N = 4): 1.5·(8.4 + 12·3.4 + 3·14.0) µs;
  // the bandwidth term is untouched (at 4 GiB Simple still wins).
  spec::Nccl scaled;
  scaled.latency_scale = 1.5;
  const NcclModel m(CollectiveKind::kAllGather, NcclGroup{16, 4, 100e9}, scaled);
  const NcclModel plain(CollectiveKind::kAllGather, NcclGroup{16, 4, 100e9}, spec::Nccl{});
  const NcclChoice c = m.choose(int64_t{4} << 30), p = plain.choose(int64_t{4} << 30);
  ASSERT_EQ(c.proto, NcclProto::kSimple);
  EXPECT_NEAR(c.latency_s * 1e6, 1.5 * (8.4 + 12 * 3.4 + 3 * 14.0), 1e-9);
  EXPECT_NEAR(c.seconds - c.latency_s, p.seconds - p.latency_s, 1e-15);
}

TEST(Collectives, TheVersionTableDecidesTheLatency) {
  // The 3-node, 12-GPU all-gather of ThreeNodeRingAllGatherByHand under older NCCL (no
  // netOverhead before 2.18, baseLat Simple 8.4 in all):
  //   2.10: 8.4 + 9·3.4 + 2·9.6  = 58.2 µs     2.12: 8.4 + 9·3.4 + 2·28 = 95.0 µs
  //   2.18: 8.4 + 9·3.4 + 2·14.0 = 67.0 µs (Intel host: netOverhead 3 µs < 3.4)
  //   2.18 on an AMD host: intraLat max(3.4, 2·3 = 6.0): 8.4 + 9·6.0 + 2·14 = 90.4 µs
  ClusterShape shape;
  shape.nodes = 3;
  spec::Cluster c = make_cluster(shape);
  const auto latency_us = [&](const char* version, int minor, spec::HostCpu cpu) {
    c.nccl.version = version;
    c.nccl.minor = minor;
    c.nccl.host_cpu = cpu;
    const Topology topo(c, 12);
    const NcclChoice ch = CollectiveCost(CollectiveKind::kAllGather, iota_gpus(0, 12), topo).choose(120'000'000);
    EXPECT_EQ(ch.proto, NcclProto::kSimple) << version;
    return ch.latency_s * 1e6;
  };
  EXPECT_NEAR(latency_us("2.10", 10, spec::HostCpu::kIntel), 58.2, 1e-9);
  EXPECT_NEAR(latency_us("2.12", 12, spec::HostCpu::kIntel), 95.0, 1e-9);
  EXPECT_NEAR(latency_us("2.18", 18, spec::HostCpu::kIntel), 67.0, 1e-9);
  EXPECT_NEAR(latency_us("2.18", 18, spec::HostCpu::kAmd), 90.4, 1e-9);
  EXPECT_THROW(nccl_band(6), std::invalid_argument);
  EXPECT_THROW(nccl_band(31), std::invalid_argument);
}

TEST(Collectives, BusBandwidthFollowsTheNicsTheMembersUse) {
  // {0, 4}: one GPU per node, NIC 0 each: 25 GB/s. {0, 1, 4, 5}: NICs 0 and 1: 50 GB/s.
  // {0, 2, 4, 6}: local 0 and 2 both use NIC 0 (2 NICs per node): 25 GB/s. With a taper of 2 the
  // uplink is 2·25/2 = 25 GB/s, so {0, 1, 4, 5} falls to 25 (ρ = 1).
  ClusterShape shape;
  const Topology topo(make_cluster(shape), 8);
  const auto bus = [&](const Topology& t, std::vector<int64_t> g) { return group_bus(g, t); };
  EXPECT_DOUBLE_EQ(bus(topo, {0, 4}).Bps, 25e9);
  EXPECT_DOUBLE_EQ(bus(topo, {0, 1, 4, 5}).Bps, 50e9);
  EXPECT_DOUBLE_EQ(bus(topo, {0, 2, 4, 6}).Bps, 25e9);
  EXPECT_DOUBLE_EQ(bus(topo, {0, 1}).Bps, 100e9);
  shape.oversubscription = 2.0;
  const Topology tapered(make_cluster(shape), 8);
  const GroupBus b = bus(tapered, {0, 1, 4, 5});
  EXPECT_DOUBLE_EQ(b.Bps, 25e9);
  EXPECT_DOUBLE_EQ(b.rho, 1.0);
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
    return collective_time_ns(CollectiveKind::kAllReduce, S, group, topo);
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

}  // namespace
}  // namespace stagecraft::sim
