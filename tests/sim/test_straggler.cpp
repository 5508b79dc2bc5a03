// Stragglers (spec::Straggler, sim/straggler.hpp): a slow GPU stretches a symmetric data-parallel
// step by exactly its own compute's extra time, and the others wait for it at the gradient
// all-reduce; a slow NIC stretches the ring all-reduce across it by its factor; the cluster file's
// "straggler" is checked by field.
#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "core/spec/error.hpp"
#include "core/spec/bundled.hpp"
#include "sim/straggler.hpp"

namespace stagecraft::sim {
namespace straggler_test {

// Two blocks, h = 512: gradients of ~6.3 M elements (12.6 MB in bf16).
spec::Model model() {
  return spec::model_from_json({{"name", "m"}, {"layers", 2}, {"hidden", 512}, {"heads", 8}, {"vocab", 256},
                                {"seq_len", 512}, {"tied_embeddings", false}},
                               "m.json");
}

// ZeRO-0 over dp 4, one micro-batch, the gradients all-reduced after the last backward
// (overlap_comm false: nothing overlaps the compute).
program::Program dp4() {
  const spec::Plan p = spec::plan_from_json({{"dp", 4}, {"zero", {{"stage", 0}, {"overlap_comm", false}}}}, "plan.json");
  const spec::Training t = spec::training_from_json({{"global_batch", 4}, {"dtype", "bf16"}, {"attention", "unfused"}}, "t.json");
  return program::lower(model(), t, p);
}

TEST(Straggler, ASlowGpuStretchesADataParallelStepByItsOwnExtraCompute) {
  // 4 GPUs of one node, each with its own compute; the step is compute, then the all-reduce
  // (every rank's compute before it), then the optimizer: with GPU 2 f times slower, every
  // kernel of rank 2 takes f times its time, and the others wait for it at the all-reduce:
  //   T' = T + (f − 1)·C,  C = a rank's compute-lane time in the symmetric step
  const spec::Cluster c = test::ideal_cluster(1, 4);
  const program::Program prog = dp4();
  const SimResult sym = simulate(prog, c);
  spec::Cluster slow = c;
  const double f = 1.5;
  slow.straggler = spec::Straggler{spec::Straggler::Kind::kGpu, 2, 1, f};
  const SimResult r = simulate(prog, slow);
  const double C = sym.metrics.time.compute_s;
  ASSERT_GT(C, 1e-4);
  EXPECT_NEAR(r.metrics.step_time_s, sym.metrics.step_time_s + (f - 1) * C, 1e-8 * 400);
  const std::optional<StragglerReport> rep = straggler_report(prog, slow, r);
  ASSERT_TRUE(rep.has_value());
  EXPECT_NEAR(rep->slowdown_of_step, (sym.metrics.step_time_s + (f - 1) * C) / sym.metrics.step_time_s, 1e-6);
  // the other ranks wait at the all-reduce for rank 2's forward and backward: (f − 1) of them,
  // which is C less the optimizer step that follows the all-reduce
  EXPECT_EQ(rep->waiting_lane, program::Lane::kDpReduce);
  EXPECT_GT(rep->wait_growth_s[static_cast<std::size_t>(program::Lane::kDpReduce)], 0.5 * (f - 1) * C);
  EXPECT_LE(rep->wait_growth_s[static_cast<std::size_t>(program::Lane::kDpReduce)], (f - 1) * C + 1e-8 * 400);
  EXPECT_NE(straggler_text(*rep).find("gpu 2 ×1.5"), std::string::npos) << straggler_text(*rep);
}

TEST(Straggler, ASlowNicStretchesTheRingAcrossItByItsFactor) {
  // dp 2 over two nodes of one GPU, one NIC each of 1e9 B/s: the all-reduce's 12.6 MB take
  // ~12.6 ms on the wire against µs of latency, so its time is the bytes over the NIC; NIC 1 at
  // half speed doubles it (the ring's slowest link sets its pace)
  test::ClusterShape shape;
  shape.nodes = 2;
  shape.gpus_per_node = 1;
  shape.nics_per_node = 1;
  shape.nic_Bps = 1e9;
  spec::Cluster c = test::make_cluster(shape);
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e14;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  const spec::Plan p = spec::plan_from_json({{"dp", 2}, {"zero", {{"stage", 0}, {"overlap_comm", false}}}}, "plan.json");
  const spec::Training t = spec::training_from_json({{"global_batch", 2}, {"dtype", "bf16"}, {"attention", "unfused"}}, "t.json");
  const program::Program prog = program::lower(model(), t, p);
  const SimResult sym = simulate(prog, c);
  spec::Cluster slow = c;
  slow.straggler = spec::Straggler{spec::Straggler::Kind::kNic, 1, 1, 2.0};
  const SimResult r = simulate(prog, slow);
  ASSERT_GT(sym.metrics.time.dp_s, 5e-3);
  EXPECT_NEAR(r.metrics.time.dp_s, 2.0 * sym.metrics.time.dp_s, 0.01 * sym.metrics.time.dp_s);
  EXPECT_NEAR(r.metrics.step_time_s - sym.metrics.step_time_s, sym.metrics.time.dp_s, 0.01 * sym.metrics.time.dp_s);
}

TEST(Straggler, TheClusterFilesStragglerIsCheckedByField) {
  const auto cluster = [](const nlohmann::json& straggler) {
    // the bundled DGX H100 profile at 2 nodes: 16 GPUs, 8 NICs a node
    nlohmann::json j = spec::to_json(spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-h100-ndr")));
    j["nodes"] = 2;
    j["straggler"] = straggler;
    return spec::cluster_from_json(j, "c.json");
  };
  const spec::Cluster ok = cluster({{"kind", "node"}, {"first", 1}, {"slowdown", 2}});
  ASSERT_TRUE(ok.straggler.has_value());
  EXPECT_EQ(ok.straggler->kind, spec::Straggler::Kind::kNode);
  EXPECT_EQ(spec::describe(*ok.straggler), "node 1 ×2");
  EXPECT_EQ(spec::cluster_from_json(spec::to_json(ok), "back.json").straggler->first, 1);
  const auto pointer = [&](const nlohmann::json& s) {
    try {
      cluster(s);
    } catch (const spec::SpecError& e) {
      return e.pointer();
    }
    return std::string();
  };
  EXPECT_EQ(pointer({{"kind", "gpu"}, {"first", 16}, {"slowdown", 2}}), "/straggler/first");    // 16 GPUs: 0-15
  EXPECT_EQ(pointer({{"kind", "nic"}, {"first", 15}, {"count", 2}, {"slowdown", 2}}), "/straggler/count");  // NICs 0-15
  EXPECT_EQ(pointer({{"kind", "gpu"}, {"slowdown", 0.5}}), "/straggler/slowdown");  // faster is not a straggler
  EXPECT_EQ(pointer({{"kind", "disk"}, {"slowdown", 2}}), "/straggler/kind");
}

}  // namespace straggler_test
}  // namespace stagecraft::sim
