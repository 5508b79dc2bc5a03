// Link features against the collective model (sim/models/collectives.hpp) and by hand, on the
// hand-made cluster: 2 nodes × 4 GPUs, NVLink β 100 GB/s α 1 µs, 2 NICs of 25 GB/s per node, α 5 µs,
// NCCL 2.30 defaults (Intel host, Ampere, 16 channels).
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
  // all-gather over 4 GPUs of S = 4 MB: NCCL's Ring Simple (above LL's 1.36 MB crossover), its
  // latency from the 2.30 table, 8.4 + 3·3.4 = 18.6 µs, and S·(3/4)/β_nvlink (ρ = 1, fraction 4/3
  // of the bus bandwidth as algorithm bandwidth): 3e6 B at 100 GB/s.
  const std::vector<int64_t> g = {0, 1, 2, 3};
  const LinkFeatures f = links.collective(CollectiveKind::kAllGather, 4'000'000, g);
  EXPECT_NEAR(f.fixed_s, 18.6e-6, 1e-15);
  EXPECT_DOUBLE_EQ(f.a_intra + f.a_inter, 0);
  EXPECT_NEAR(f.b_intra, 3e6, 1e-6);
  EXPECT_DOUBLE_EQ(f.b_inter, 0);
  EXPECT_NEAR(seconds(f), 18.6e-6 + 3e6 / 100e9, 1e-15);
}

TEST_F(LinksTest, TwoNodeAllReduceByHand) {
  // 8 GPUs on 2 nodes (k = 4 on NICs {0, 1}: B = 2·β_nic = 50 GB/s, ρ = 2), S = 8 MB:
  //   Ring LL128: lat 14.0 + 12·1.9 + 2·4.0 = 44.8 µs, busBw 0.92·B, algBw ×8/14:
  //               S·14/8/(0.92·50 GB/s) = 304.35 µs  -> 349.15 µs
  //   Ring Simple: lat 77.2·1.4 = 108.08 µs + S·14/8/50 GB/s = 280 µs -> 388.08: slower below 20.8 MB.
  // So b_inter = S·14/8 / (0.92·ρ) = 8e6·14/(8·0.92·2) bytes at β_nic.
  const std::vector<int64_t> g = {0, 1, 2, 3, 4, 5, 6, 7};
  const LinkFeatures f = links.collective(CollectiveKind::kAllReduce, 8'000'000, g);
  EXPECT_NEAR(f.fixed_s, 44.8e-6, 1e-15);
  EXPECT_DOUBLE_EQ(f.b_intra, 0);
  EXPECT_NEAR(f.b_inter, 8e6 * 14 / (8 * 0.92 * 2), 1e-3);
  EXPECT_NEAR(seconds(f), 44.8e-6 + 8e6 * 14 / 8 / (0.92 * 50e9), 1e-15);
}

TEST_F(LinksTest, MatchesTheCollectiveModelEverywhere) {
  const std::vector<std::vector<int64_t>> groups = {{0, 1}, {0, 1, 2, 3}, {0, 4}, {1, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 4, 6}};
  for (const auto& g : groups) {
    for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce}) {
      for (int64_t bytes : {int64_t{64}, int64_t{100'000}, int64_t{123'456'789}}) {
        const double expected = static_cast<double>(sim::collective_time_ns(kind, bytes, g, links.topology())) * 1e-9;
        const LinkFeatures f = links.collective(kind, bytes, g);
        // the model rounds the total up to a whole ns
        EXPECT_NEAR(seconds(f), expected, 1.0001e-9) << sim::to_string(kind) << " " << bytes << " over " << g.size();
      }
    }
  }
}

TEST_F(LinksTest, PointToPointAndTheGradientNormAllReduce) {
  // inside a node: α_intra + S/β_nvlink; across: α_inter + S/β_nic (one flow has the NIC alone)
  EXPECT_NEAR(seconds(links.p2p(0, 1, 1'000'000)), 1e-6 + 1e6 / 100e9, 1e-15);
  EXPECT_NEAR(seconds(links.p2p(0, 4, 1'000'000)), 5e-6 + 1e6 / 25e9, 1e-15);
  // gradient-norm all-reduce, 4 bytes over 8 GPUs on 2 nodes: NCCL's Tree LL,
  //   lat 6.8 + 2·((8/2 − 1)·0.6 + ⌊log2 2⌋·5.0) = 20.4 µs (Ring LL: 6.6 + 12·1.0 + 2·2.7 = 24.0),
  //   algBw = min(0.92·50 GB/s, 16·23.6)/3.8 · 1/2: 4 bytes in 0.66 ns. No α of the profile enters.
  const LinkFeatures t = links.gradnorm_allreduce(8);
  EXPECT_EQ(t.a_intra + t.a_inter, 0);
  EXPECT_EQ(t.b_intra, 0);
  EXPECT_NEAR(seconds(t), 20.4e-6 + 4 / (0.92 * 50e9 / 3.8 * 0.5), 1e-15);
}

}  // namespace
}  // namespace stagecraft::traces
