// Hierarchical and quantized ZeRO-3 in the simulator: on a network slow enough that the
// data-parallel traffic is all the step does, each variant's data-parallel busy time is what its
// byte counts give over the links they cross — derived here by hand from the collectives each
// variant issues (docs/program.md) and the collective model's bandwidth terms (collectives.hpp).
#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "sim/memory_accounting.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {
namespace zero_hierarchy_sim {

// 2 nodes × 4 GPUs, one NIC per node of B = 1e8 B/s, NVLink 1e12 B/s, GEMMs at 1e18 FLOP/s and
// memory-bound work free: compute is microseconds against ~0.1 s per collective, and NCCL's
// latencies (tens of µs) are below 0.1% of any transfer.
constexpr double kNic = 1e8;
constexpr double kNvlink = 1e12;

spec::Cluster slow_network() {
  test::ClusterShape shape;
  shape.nodes = 2;
  shape.gpus_per_node = 4;
  shape.nics_per_node = 1;
  shape.nic_Bps = kNic;
  shape.nvlink_Bps = kNvlink;
  spec::Cluster c = test::make_cluster(shape);
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e18;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.hbm_Bps = 1e30;
  c.gpu.memory_bytes = int64_t{1} << 40;
  return c;
}

// h = 512 (every matrix's elements divide by 2 × 8 ranks, as qgZ needs), two blocks.
spec::Model model() {
  return spec::model_from_json({{"name", "m"}, {"layers", 2}, {"hidden", 512}, {"heads", 8}, {"vocab", 16},
                                {"seq_len", 128}, {"tied_embeddings", false}},
                               "m.json");
}

// ZeRO-3 over dp 8, one micro-batch, one parameter bucket and one gradient bucket (buckets of 1e9
// elements), every tensor gathered (threshold 0), regathered for the backward (reuse distance 0),
// DeepSpeed with one communicator, so the data-parallel collectives run one after another.
program::Program lower(const nlohmann::json& extra) {
  nlohmann::json zero = {{"stage", 3},          {"prefetch_bucket", 1000000000}, {"reduce_bucket", 1000000000},
                         {"max_live_parameters", 1000000000}, {"max_reuse_distance", 0},
                         {"param_persistence_threshold", 0}, {"overlap_comm", true}};
  zero.update(extra);
  const spec::Plan p = spec::plan_from_json({{"dp", 8}, {"micro_batch", 1}, {"micro_batches", 1}, {"zero", zero}}, "plan.json");
  const spec::Training t = spec::training_from_json(
      {{"global_batch", 8}, {"dtype", "bf16"}, {"attention", "unfused"}, {"framework", {{"name", "deepspeed"}, {"reduce_communicator", "shared"}}}},
      "training.json");
  return program::lower(model(), t, p);
}

double dp_busy_s(const program::Program& prog) { return simulate(prog, slow_network()).metrics.time.dp_s; }

// Bytes an instruction of `op` on `group` moves in rank 0's list (the first one).
int64_t bytes_of(const program::Program& prog, program::Op op, program::Group group) {
  for (const program::Instr& in : prog.rank(0)) {
    if (in.op == op && in.group == group) return in.bytes;
  }
  ADD_FAILURE() << "no " << program::to_string(op) << " on " << program::to_string(group);
  return 0;
}

TEST(ZeroHierarchySim, EachVariantMovesTheBytesItsCollectivesCarry) {
  const double P = static_cast<double>(count::parameters(model()));
  const double S = 2 * P;              // the bf16 model, the buffer of a gather or reduce-scatter
  const double ring = 7.0 / 8.0;       // (n − 1)/n of S crosses each node's NIC in a ring over 8
  const double tol = 0.005;            // latencies and compute, relative

  // plain: forward gather, backward gather, reduce-scatter, each S·7/8 through the node's NIC
  const double plain = 3 * S * ring / kNic;
  EXPECT_NEAR(dp_busy_s(lower(nlohmann::json::object())), plain, tol * plain);

  // hpZ (h = 4, a node): the backward gather goes over NVLink (S·3/4 at 1e12), the rest as before
  const double hpz = 2 * S * ring / kNic + S * 0.75 / kNvlink;
  EXPECT_NEAR(dp_busy_s(lower({{"hpz_group", 4}})), hpz, tol * hpz);

  // qwZ: both gathers move int8 values and fp32 scales, Q bytes each Q·7/8 through the NIC; the
  // reduce-scatter is unchanged. Every tensor divides by 8, so a rank's shard is P/8 = 798464 =
  // 2^8 · 3119 (3119 prime) elements, and DeepSpeed's group count, from ⌈798464/8000⌉ = 100 up to
  // the first g with 8g | 798464, is 3119 (groups of 256): Q = P + 4 · 3119 · 8 bytes.
  ASSERT_EQ(P, 8 * 798464);
  const program::Program qwz_prog = lower({{"quantized_weights", true}});
  const double Q = P + 4.0 * 3119 * 8;
  EXPECT_EQ(bytes_of(qwz_prog, program::Op::kGatherParams, program::Group::kDp), static_cast<int64_t>(Q));
  const double qwz = 2 * Q * ring / kNic + S * ring / kNic;
  EXPECT_NEAR(dp_busy_s(qwz_prog), qwz, tol * qwz);

  // qgZ (4 ranks a node): the matrices' int4 all-to-all inside the node (NVLink, S_l·3/4), then
  // across the 2 nodes, S_c·(2 − 1)/2 through a NIC the node's 4 ranks share (B/4), and the vectors
  // reduce-scattered one by one over the ring (V bytes)
  const program::Program qgz_prog = lower({{"quantized_gradients", true}, {"local_group", 4}});
  const double S_l = static_cast<double>(bytes_of(qgz_prog, program::Op::kAllToAll, program::Group::kDpLocal));
  const double S_c = static_cast<double>(bytes_of(qgz_prog, program::Op::kAllToAll, program::Group::kDpCross));
  const double V = static_cast<double>(bytes_of(qgz_prog, program::Op::kReduceScatterGrads, program::Group::kDp));
  EXPECT_NEAR(S_c, S_l / 4, 4);      // a quarter after the node's sum (the scales' ⌊G/4⌋ rounding aside)
  EXPECT_LT(V, 0.01 * S);
  const double qgz = 2 * S * ring / kNic + S_l * 0.75 / kNvlink + S_c * 0.5 / (kNic / 4) + V * ring / kNic;
  EXPECT_NEAR(dp_busy_s(qgz_prog), qgz, tol * qgz);

  // MiCS (shard groups of 4, a node): gathers and the reduce-scatter inside the node; the shard,
  // ⌈P/4⌉ elements, all-reduced once over its 2 replicas (ring: algBw = busBw·n/(2(n − 1)) = B),
  // and a node's 4 replica groups share its NIC, so 4 × (2⌈P/4⌉)/B
  const program::Program mics_prog = lower({{"shard_group", 4}});
  const double shard = 2 * std::ceil(P / 4);
  const double mics = 3 * S * 0.75 / kNvlink + 4 * shard / kNic;
  EXPECT_NEAR(dp_busy_s(mics_prog), mics, tol * mics);

  // the direction: each remedy moves less across the NIC than plain ZeRO-3
  for (double v : {hpz, qwz, qgz, mics}) EXPECT_LT(v, plain);
}

TEST(ZeroHierarchySim, MemoryHoldsTheSecondaryPartitionAndTheLargerShards) {
  const spec::Cluster c = slow_network();
  const int64_t P = count::parameters(model());
  const trace::MemoryBytes plain = stage_static_memory(lower(nlohmann::json::object()), 0, c);
  // hpZ: 2·⌈P/4⌉ more parameter bytes (every tensor is gathered at threshold 0)
  const trace::MemoryBytes hpz = stage_static_memory(lower({{"hpz_group", 4}}), 0, c);
  EXPECT_EQ(hpz[trace::MemoryKind::kParams] - plain[trace::MemoryKind::kParams], 2 * ((P + 3) / 4));
  // MiCS over 4: parameters, gradients (2 bytes each) and Adam (12) sharded over 4, not 8
  const trace::MemoryBytes mics = stage_static_memory(lower({{"shard_group", 4}}), 0, c);
  EXPECT_EQ(mics[trace::MemoryKind::kParams], 2 * ((P + 3) / 4));
  EXPECT_EQ(mics[trace::MemoryKind::kGrads], 2 * ((P + 3) / 4));
  EXPECT_EQ(mics[trace::MemoryKind::kOptimizer], 12 * ((P + 3) / 4));
  EXPECT_EQ(plain[trace::MemoryKind::kOptimizer], 12 * ((P + 7) / 8));
}

}  // namespace zero_hierarchy_sim
}  // namespace stagecraft::sim
