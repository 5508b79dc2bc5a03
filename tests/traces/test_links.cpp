// Link features against the collective model (sim/models/collectives.hpp) and by hand, on the
// hand-made cluster: 2 nodes × 4 GPUs, NVLink β 100 GB/s α 1 µs, 2 NICs of 25 GB/s per node, α 5 µs.
#include "traces/calibrate/links.hpp"

#include <gtest/gtest.h>

#include "sim/cluster_fixture.hpp"

namespace stagecraft::traces {
namespace {

using sim::CollectiveKind;

struct LinksTest : ::testing::Test {
  spec::Cluster c = test::make_cluster();
  LinkModel links{c, 8};
  double seconds(const LinkFeatures& f) const {
    return f.seconds(static_cast<double>(c.intra_node.latency_ns) * 1e-9, c.intra_node.bandwidth_Bps,
                     static_cast<double>(c.inter_node.latency_ns) * 1e-9, c.inter_node.nic_bandwidth_Bps);
  }
};

TEST_F(LinksTest, RingInsideANodeByHand) {
  // all-gather over 4 GPUs of S = 4 MB: 3 steps of α + (S/4)/β = 3·1 µs + 3e6 B / 100 GB/s = 33 µs
  const std::vector<int64_t> g = {0, 1, 2, 3};
  const LinkFeatures f = links.collective(CollectiveKind::kAllGather, 4'000'000, g);
  EXPECT_DOUBLE_EQ(f.a_intra, 3);
  EXPECT_DOUBLE_EQ(f.b_intra, 3 * 1'000'000.0);
  EXPECT_DOUBLE_EQ(f.a_inter + f.b_inter, 0);
  EXPECT_NEAR(seconds(f), 3e-6 + 3e6 / 100e9, 1e-15);
}

TEST_F(LinksTest, HierarchicalAllReduceByHand) {
  // 8 GPUs, k = 4 per node, N = 2 nodes, S = 8 MB:
  //   intra: 2(k−1) = 6 steps of α_intra + (S/k)/β_nvlink
  //   inter: 2(N−1) = 2 steps of α_inter + (S/(kN))/β_rail; 4 rails share 2 NICs, so
  //          β_rail = 25 GB/s / 2 = 12.5 GB/s = ρ·β_nic with ρ = 1/2
  const std::vector<int64_t> g = {0, 1, 2, 3, 4, 5, 6, 7};
  const LinkFeatures f = links.collective(CollectiveKind::kAllReduce, 8'000'000, g);
  EXPECT_DOUBLE_EQ(f.a_intra, 6);
  EXPECT_DOUBLE_EQ(f.b_intra, 6 * 2'000'000.0);
  EXPECT_DOUBLE_EQ(f.a_inter, 2);
  EXPECT_DOUBLE_EQ(f.b_inter, 2 * 1'000'000.0 / 0.5);
  EXPECT_NEAR(seconds(f), 6e-6 + 1.2e7 / 100e9 + 2 * 5e-6 + 4e6 / 25e9, 1e-15);
}

TEST_F(LinksTest, MatchesTheCollectiveModelEverywhere) {
  const std::vector<std::vector<int64_t>> groups = {{0, 1}, {0, 1, 2, 3}, {0, 4}, {1, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 4, 6}};
  for (const auto& g : groups) {
    for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
      for (int64_t bytes : {int64_t{64}, int64_t{100'000}, int64_t{123'456'789}}) {
        const double expected = static_cast<double>(sim::collective_time_ns(kind, bytes, g, links.topology())) * 1e-9;
        const LinkFeatures f = links.collective(kind, bytes, g);
        const double steps = f.a_intra + f.a_inter;
        // the model rounds every step's transfer up to a whole ns
        EXPECT_NEAR(seconds(f), expected, steps * 1e-9) << sim::to_string(kind) << " " << bytes << " over " << g.size();
      }
    }
  }
}

TEST_F(LinksTest, PointToPointAndTheLatencyTree) {
  // inside a node: α_intra + S/β_nvlink; across: α_inter + S/β_nic (one flow has the NIC alone)
  EXPECT_NEAR(seconds(links.p2p(0, 1, 1'000'000)), 1e-6 + 1e6 / 100e9, 1e-15);
  EXPECT_NEAR(seconds(links.p2p(0, 4, 1'000'000)), 5e-6 + 1e6 / 25e9, 1e-15);
  // gradient-norm all-reduce over 8: 2⌈log2 4⌉ = 4 intra steps, 2⌈log2 2⌉ = 2 inter steps
  const LinkFeatures t = links.tree_latency(8);
  EXPECT_EQ(t.a_intra, 4);
  EXPECT_EQ(t.a_inter, 2);
  EXPECT_EQ(t.b_intra + t.b_inter, 0);
}

}  // namespace
}  // namespace stagecraft::traces
