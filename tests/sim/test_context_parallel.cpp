// Context parallelism in the simulator: its lane carries exactly the collectives the lowering
// issues, each at the collective model's time over the cp group (derived here from the shapes and
// the model, collectives.hpp); the p2p ring hides behind the attention it feeds where the
// all-gather variant puts the same collectives on the critical path; a rank holds 1/cp of the
// activations.
#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "sim/models/collectives.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {
namespace context_parallel_sim {

// One node of 2 GPUs over NVLink of 1e9 B/s, compute at 1e13 FLOP/s: at seq 4096 an attention
// sublayer's compute (~ms) outlasts its K/V exchange (~0.2 ms).
spec::Cluster cluster() { return test::slow_link_node(2, 1e9, 1e13); }

// h = 256, 4 heads of d = 64 (2 K/V heads), 2 blocks, seq 4096.
spec::Model model() {
  return spec::model_from_json({{"name", "m"}, {"layers", 2}, {"hidden", 256}, {"heads", 4}, {"kv_heads", 2},
                                {"vocab", 64}, {"seq_len", 4096}, {"tied_embeddings", false}},
                               "m.json");
}

program::Program lower(const nlohmann::json& plan) {
  const spec::Plan p = spec::plan_from_json(plan, "plan.json");
  const spec::Training t = spec::training_from_json(
      {{"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}, {"attention", "unfused"}, {"framework", "megatron"}}, "training.json");
  return program::lower(model(), t, p);
}

TEST(ContextParallelSim, TheLaneCarriesEachCollectiveAtItsModelledTime) {
  const spec::Cluster c = cluster();
  const program::Program prog = lower({{"cp", 2}, {"cp_comm_type", "all_gather"}});
  const SimResult r = simulate(prog, c);
  // per micro-batch: 2 attention units, each a K/V gather forward and a gather and a dK/dV reduce
  // backward, of S = cp · T · 2k · d · w = 2 · 2048 · 2·2 · 64 · 2 bytes (T = 4096/2, k = 2 K/V heads)
  const int64_t S = 2 * 2048 * 2 * 2 * 64 * 2;
  const Topology topology(c, 2);
  const std::vector<int64_t> group = {0, 1};
  const double gather_s = static_cast<double>(CollectiveCost(CollectiveKind::kAllGather, group, topology).time_ns(S)) * 1e-9;
  const double reduce_s = static_cast<double>(CollectiveCost(CollectiveKind::kReduceScatter, group, topology).time_ns(S)) * 1e-9;
  EXPECT_GT(gather_s, 1e-4);  // the bytes over 1e9 B/s: a transfer, not a latency
  EXPECT_NEAR(r.metrics.time.cp_s, 2 * (2 * gather_s + reduce_s), 1e-9 * 6);
}

TEST(ContextParallelSim, TheRingHidesWhatTheAllGatherExposes) {
  const spec::Cluster c = cluster();
  const SimResult ring = simulate(lower({{"cp", 2}}), c);
  const SimResult gather = simulate(lower({{"cp", 2}, {"cp_comm_type", "all_gather"}}), c);
  // the same collectives on the cp lane
  EXPECT_NEAR(ring.metrics.time.cp_s, gather.metrics.time.cp_s, 1e-9 * 6);
  // the ring runs beside attention that outlasts it: what shows is the gradients' all-reduce over
  // the dp·cp = 2 ranks (and the gradient norm's) after the last backward, none of the ring ...
  EXPECT_GT(ring.metrics.time.dp_s, 0);
  EXPECT_LE(ring.metrics.time.exposed_comm_s, ring.metrics.time.dp_s + 1e-6);
  // ... where the all-gather variant waits for every one of its collectives
  EXPECT_NEAR(gather.metrics.step_time_s - ring.metrics.step_time_s, gather.metrics.time.cp_s, 1e-9 * 6);
  EXPECT_NEAR(gather.metrics.time.exposed_comm_s - ring.metrics.time.exposed_comm_s, gather.metrics.time.cp_s, 1e-9 * 6);
}

TEST(ContextParallelSim, ARankHoldsItsShareOfTheActivations) {
  // cp 2 against dp 2 on the same 2 GPUs, one sequence a rank (dp) or half of one (cp): the
  // activations a rank holds are the tokens it computes, 4096 against 2048
  const spec::Cluster c = cluster();
  const SimResult cp = simulate(lower({{"cp", 2}}), c);
  const SimResult dp = simulate(lower({{"dp", 2}}), c);
  const double a_cp = static_cast<double>(cp.metrics.memory[trace::MemoryKind::kActivations]);
  const double a_dp = static_cast<double>(dp.metrics.memory[trace::MemoryKind::kActivations]);
  EXPECT_GT(a_dp, 0);
  EXPECT_NEAR(a_cp, a_dp / 2, 8.0);   // each unit's bytes rounded down to a whole byte
}

TEST(ContextParallelSim, EveryRankRunsAsTheReplicaSaysForEachCommType) {
  // tp 2 × cp 2 × pp 2 over two nodes of 4 (a2a: tp 1 × cp 2 × pp 2 × dp 2, its cp splitting the
  // model's 2 K/V heads): the cp groups' other members, run for real, arrive with the simulated
  // ones (symmetry.hpp)
  const spec::Cluster c = test::ideal_cluster(2, 4);
  for (const std::string comm : {"p2p", "all_gather", "a2a"}) {
    SCOPED_TRACE(comm);
    const bool a2a = comm == "a2a";
    const program::Program prog = lower({{"tp", a2a ? 1 : 2}, {"cp", 2}, {"cp_comm_type", comm}, {"pp", 2}, {"dp", a2a ? 2 : 1},
                                         {"micro_batches", 4}, {"sequence_parallel", !a2a}});
    SimOptions full;
    full.full = true;
    const SimResult a = simulate(prog, c), b = simulate(prog, c, full);
    EXPECT_EQ(a.metrics.simulated_ranks, 2);
    EXPECT_EQ(b.metrics.simulated_ranks, 8);
    EXPECT_NEAR(a.metrics.step_time_s, b.metrics.step_time_s, 1e-9 * b.metrics.step_time_s);
    EXPECT_NEAR(a.metrics.time.cp_s, b.metrics.time.cp_s, 1e-9 * b.metrics.step_time_s);
    EXPECT_GT(a.metrics.time.cp_s, 0);
  }
}

}  // namespace context_parallel_sim
}  // namespace stagecraft::sim
