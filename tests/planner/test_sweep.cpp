// Sweeps (planner/sweep.hpp): each point is the simulation `simulate --set` gives, less bandwidth
// never makes a plan faster, the winner and its changes are the argmin the test recomputes, a plan
// that cannot run at a point says why, and ranges are spaced as documented.
#include "planner/sweep.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "fixtures.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {
namespace {

using spec::ConfigKind;

SweepInputs demo_inputs() {
  SweepInputs in;
  in.model = test::bundled_model("gpt3-13b");
  in.cluster_path = spec::resolve_config(ConfigKind::kCluster, "dgx-h100-ndr");
  in.training_path = spec::resolve_config(ConfigKind::kTraining, "demo-13b-1024");
  return in;
}

std::vector<SweepPlan> demo_plans() {
  // the hand-written demo plan (tp8 pp2, ZeRO-1) and a ZeRO-3 data-parallel one
  const spec::Plan hand = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, "demo-13b"));
  spec::Plan z3;
  z3.tp = 1;
  z3.pp = 1;
  z3.dp = 64;
  z3.micro_batch = 4;
  z3.micro_batches = 4;
  z3.zero.stage = 3;
  return {{plan_key(hand), hand}, {plan_key(z3), z3}};
}

TEST(Sweep, EachPointIsTheSimulationOfTheOverriddenCluster) {
  const SweepInputs in = demo_inputs();
  const std::vector<SweepPlan> plans = demo_plans();
  const std::vector<std::string> values = {"25Gbps", "50Gbps", "100Gbps", "200Gbps", "400Gbps"};
  const spec::Override axis = spec::parse_override("cluster.inter_node.nic_bandwidth_Bps=0");
  const Sweep s = sweep(in, axis, values, plans, 2);
  ASSERT_EQ(s.points.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const spec::Cluster c = spec::load_cluster(in.cluster_path, {spec::with_value(axis, values[i])});
    EXPECT_DOUBLE_EQ(c.inter_node.nic_bandwidth_Bps, std::stod(values[i]) * 1e9 / 8);
    const spec::Training t = spec::load_training(in.training_path);
    for (std::size_t j = 0; j < plans.size(); ++j) {
      ASSERT_TRUE(s.points[i].cells[j].ok) << s.points[i].cells[j].error;
      const program::Program prog = program::lower(spec::with_training_length(in.model, t), t, plans[j].plan);
      EXPECT_EQ(s.points[i].cells[j].metrics.step_time_s, sim::simulate(prog, c).metrics.step_time_s) << values[i] << " " << j;
    }
  }
  // doubling the bandwidth never slows a plan down
  for (std::size_t j = 0; j < plans.size(); ++j) {
    for (std::size_t i = 1; i < values.size(); ++i) {
      EXPECT_LE(s.points[i].cells[j].metrics.step_time_s, s.points[i - 1].cells[j].metrics.step_time_s) << j << " at " << values[i];
    }
  }
  // the winner is the fastest that fits; a change is reported where the argmin differs
  std::vector<std::size_t> changes;
  for (std::size_t i = 0; i < values.size(); ++i) {
    int best = -1;
    for (std::size_t j = 0; j < plans.size(); ++j) {
      const sim::Metrics& m = s.points[i].cells[j].metrics;
      if (m.fits && (best < 0 || m.step_time_s < s.points[i].cells[static_cast<std::size_t>(best)].metrics.step_time_s)) best = static_cast<int>(j);
    }
    EXPECT_EQ(s.points[i].best, best) << values[i];
    if (i > 0 && best != s.points[i - 1].best) changes.push_back(i);
  }
  EXPECT_EQ(s.changes, changes);
  EXPECT_NE(format_sweep(s).find("[1] " + plans[0].key), std::string::npos);
}

TEST(Sweep, APlanThatCannotRunAtAPointSaysWhy) {
  SweepInputs in = demo_inputs();
  const spec::Override axis = spec::parse_override("cluster.gpus_per_node=0");
  const Sweep s = sweep(in, axis, {"8", "4"}, demo_plans(), 1);
  EXPECT_TRUE(s.points[0].cells[0].ok);
  ASSERT_FALSE(s.points[1].cells[0].ok) << "a 64-GPU plan on 8 nodes x 4 GPUs";
  EXPECT_NE(s.points[1].cells[0].error.find("32"), std::string::npos) << s.points[1].cells[0].error;
  EXPECT_EQ(s.points[1].best, -1);
  EXPECT_EQ(s.changes, std::vector<std::size_t>{1});
  // a value the loader refuses stops the sweep with its message
  EXPECT_THROW(sweep(in, axis, {"8", "0"}, demo_plans(), 1), spec::SpecError);
  // the node count adapts each plan: 16 nodes = 128 GPUs, dp doubles, micro-batches halve
  const Sweep n = sweep(in, spec::parse_override("cluster.nodes=0"), {"8", "16", "12"}, demo_plans(), 1);
  ASSERT_TRUE(n.points[1].cells[1].ok) << n.points[1].cells[1].error;
  EXPECT_LT(n.points[1].cells[1].metrics.step_time_s, n.points[0].cells[1].metrics.step_time_s) << "twice the GPUs";
  EXPECT_FALSE(n.points[2].cells[1].ok) << "96 GPUs: 1024 / (96 x 4) micro-batches";
  EXPECT_NE(n.points[2].cells[1].error.find("not a whole number"), std::string::npos) << n.points[2].cells[1].error;
}

TEST(Sweep, RangesAreSpacedAsDocumented) {
  EXPECT_EQ(range_values("1:100:3:log", "--range"), (std::vector<std::string>{"1", "10", "100"}));
  EXPECT_EQ(range_values("0:1:5", "--range"), (std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1"}));
  for (const char* bad : {"1:2", "1:2:1", "0:10:3:log", "a:2:3", "1:1:3", "1:2:3:lin", "1:2:100"}) {
    EXPECT_THROW(range_values(bad, "--range"), spec::SpecError) << bad;
  }
}

}  // namespace
}  // namespace stagecraft::planner

namespace stagecraft::planner {
namespace {

// The demo's ZeRO-3 plan (tp1 pp1 dp64 mb4x4, batch 1024) on other GPU counts: 128 GPUs give
// dp 128 and 1024 / (128 · 4) = 2 micro-batches; 96 GPUs give dp 96 and 1024 / 384 = 2.67, refused
// with the nearest counts on 8-GPU nodes that work (64: 4 micro-batches, 128: 2).
TEST(AdaptPlan, KeepsTheShapeAndDerivesDpAndMicroBatches) {
  spec::Plan p = demo_plans()[1].plan;   // tp1 pp1 dp64 mb4x4
  const AdaptedPlan a = adapt_plan(p, 1024, 128, 8);
  ASSERT_TRUE(a.plan.has_value()) << a.reason;
  EXPECT_EQ(a.plan->dp, 128);
  EXPECT_EQ(a.plan->micro_batches, 2);
  EXPECT_EQ(a.plan->micro_batch, 4);
  const AdaptedPlan b = adapt_plan(p, 1024, 96, 8);
  EXPECT_FALSE(b.plan.has_value());
  EXPECT_NE(b.reason.find("1024 / (dp 96 x micro-batch 4)"), std::string::npos) << b.reason;
  EXPECT_NE(b.reason.find("nearest GPU counts that work: 64, 128"), std::string::npos) << b.reason;
  p.tp = 8;
  p.pp = 2;
  p.dp = 4;
  p.micro_batch = 1;
  p.micro_batches = 256;
  EXPECT_NE(adapt_plan(p, 1024, 72, 8).reason.find("not a multiple of tp x pp = 16"), std::string::npos);
}

}  // namespace
}  // namespace stagecraft::planner
