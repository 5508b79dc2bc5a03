// What-if: the plan re-simulated on an edited cluster is what `simulate --set` gives, less
// bandwidth never helps, the node count adapts the plan or says why, a refused value shows the
// loader's error, edits are debounced, and a sweep's change markers sit between the points that
// bracket the change.
#include <QSignalSpy>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "gui/model/whatif.hpp"
#include "gui/views/whatif_panel.hpp"
#include "gui_support.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::gui {
namespace {

planner::Evaluated evaluated(const Loaded& l, const spec::Plan& plan) {
  planner::Evaluated e;
  e.plan = plan;
  e.key = planner::plan_key(plan);
  e.metrics = planner::simulate_plan(*l.space, plan);
  return e;
}

spec::Plan demo_zero3() {
  spec::Plan p;
  p.dp = 64;
  p.micro_batch = 4;
  p.micro_batches = 4;
  p.zero.stage = 3;
  return p;
}

TEST(WhatIf, NoEditIsTheTablesNumbersAndEditsAreSimulateSet) {
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  const planner::Evaluated& best = r.top.front();
  const WhatIfResult same = evaluate_whatif(in, {}, best);
  ASSERT_TRUE(same.modified) << same.error;
  EXPECT_EQ(same.modified->step_time_s, best.metrics.step_time_s);
  EXPECT_EQ(same.modified->peak_memory_bytes, best.metrics.peak_memory_bytes);
  // 1 Gb/s per NIC: the number `simulate --set cluster.inter_node.nic_bandwidth_Bps=1.25e8` gives
  const WhatIfField& ib = whatif_field("cluster.inter_node.nic_bandwidth_Bps");
  const spec::Override slow = field_override(ib, 1.0);
  EXPECT_EQ(slow.value.get<double>(), 1e9 / 8);
  const WhatIfResult edited = evaluate_whatif(in, {slow}, best);
  ASSERT_TRUE(edited.modified) << edited.error;
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, in.cluster), {slow});
  c.nodes = in.nodes;
  const program::Program prog = program::lower(l.space->model(), l.space->training(), best.plan);
  EXPECT_EQ(edited.modified->step_time_s, sim::simulate(prog, c).metrics.step_time_s);
  // halving the bandwidth never makes one of the top plans faster
  for (const planner::Evaluated& e : r.top) {
    double last = 0;
    for (double gbps : {400.0, 200.0, 100.0, 50.0, 25.0}) {
      const WhatIfResult w = evaluate_whatif(in, {field_override(ib, gbps)}, e);
      ASSERT_TRUE(w.modified) << w.error;
      EXPECT_GE(w.modified->step_time_s, last) << e.key << " at " << gbps << " Gb/s";
      last = w.modified->step_time_s;
    }
  }
}

// A straggler what-if: GPU 0 twice as slow is the number `simulate --set cluster.straggler=...` gives
// (every rank simulated), and a step at least as long as without it.
TEST(WhatIf, AStragglerIsTheSetThatSimulateTakes) {
  const Inputs in = demo_inputs();
  const Loaded l = load(in);
  const planner::Evaluated e = evaluated(l, demo_zero3());
  const WhatIfField& f = whatif_field("cluster.straggler");
  EXPECT_EQ(field_value(l.cluster, f), 1.0);   // the demo's cluster has none
  const spec::Override slow = field_override(f, 2.0);
  EXPECT_EQ(slow.value.at("kind"), "gpu");
  EXPECT_EQ(slow.value.at("first"), 0);
  EXPECT_EQ(slow.value.at("slowdown").get<double>(), 2.0);
  const WhatIfResult w = evaluate_whatif(in, {slow}, e);
  ASSERT_TRUE(w.modified) << w.error;
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, in.cluster), {slow});
  c.nodes = in.nodes;
  const program::Program prog = program::lower(l.space->model(), l.space->training(), e.plan);
  EXPECT_EQ(w.modified->step_time_s, sim::simulate(prog, c).metrics.step_time_s);
  EXPECT_GT(w.modified->step_time_s, e.metrics.step_time_s);
  // the cluster's own straggler keeps its place
  spec::Cluster nic = l.cluster;
  nic.straggler = spec::Straggler{spec::Straggler::Kind::kNic, 3, 2, 1.5};
  EXPECT_EQ(field_value(nic, f), 1.5);
  const spec::Override moved = field_override(f, 4.0, &nic);
  EXPECT_EQ(moved.value.at("kind"), "nic");
  EXPECT_EQ(moved.value.at("first"), 3);
  EXPECT_EQ(moved.value.at("count"), 2);
}

// The demo's ZeRO-3 plan on 16 nodes: dp 64 -> 128, micro-batches 1024 / (128 · 4) = 2; on 12 nodes
// 1024 / (96 · 4) is no whole number, and nothing is simulated.
TEST(WhatIf, TheNodeCountAdaptsThePlanOrSaysWhy) {
  const Inputs in = demo_inputs();
  const Loaded l = load(in);
  const planner::Evaluated e = evaluated(l, demo_zero3());
  const WhatIfField& nodes = whatif_field("cluster.nodes");
  const WhatIfResult twice = evaluate_whatif(in, {field_override(nodes, 16)}, e);
  ASSERT_TRUE(twice.modified) << twice.error;
  EXPECT_NE(twice.plan_note.find("dp 64 -> 128, micro-batches 4 -> 2"), std::string::npos) << twice.plan_note;
  EXPECT_EQ(twice.view->plan.dp, 128);
  EXPECT_LT(twice.modified->step_time_s, e.metrics.step_time_s);
  const WhatIfResult odd = evaluate_whatif(in, {field_override(nodes, 12)}, e);
  EXPECT_FALSE(odd.modified);
  EXPECT_NE(odd.error.find("1024 / (dp 96 x micro-batch 4)"), std::string::npos) << odd.error;
  const WhatIfResult bad = evaluate_whatif(in, {field_override(whatif_field("cluster.inter_node.nics_per_node"), 0)}, e);
  EXPECT_FALSE(bad.modified);
  EXPECT_NE(bad.error.find("/inter_node/nics_per_node"), std::string::npos) << bad.error;
}

// Plan edits: the demo's ZeRO-3 plan at micro-batch 2 keeps dp 64, so 1024 / (64 · 2) = 8
// micro-batches, and simulates as that plan does; micro-batch 3 is refused (1024 / 192); a reduce
// bucket of 1e9 elements is the plan with that bucket; ZeRO-1 takes no prefetch bucket.
TEST(WhatIf, PlanEditsAreThePlanSoEdited) {
  const Inputs in = demo_inputs();
  const Loaded l = load(in);
  const planner::Evaluated e = evaluated(l, demo_zero3());
  PlanEdits mb;
  mb.micro_batch = 2;
  const WhatIfResult two = evaluate_whatif(in, {}, e, mb);
  ASSERT_TRUE(two.modified) << two.error;
  EXPECT_EQ(two.view->plan.micro_batches, 8);
  spec::Plan direct = demo_zero3();
  direct.micro_batch = 2;
  direct.micro_batches = 8;
  EXPECT_EQ(two.modified->step_time_s, planner::simulate_plan(*l.space, direct).step_time_s);
  EXPECT_NE(two.plan_note.find("micro-batches 4 -> 8"), std::string::npos) << two.plan_note;
  mb.micro_batch = 3;
  const WhatIfResult three = evaluate_whatif(in, {}, e, mb);
  EXPECT_FALSE(three.modified);
  EXPECT_NE(three.error.find("1024 / (dp 64 x micro-batch 3)"), std::string::npos) << three.error;
  PlanEdits rb;
  rb.reduce_bucket = 1'000'000'000;
  const WhatIfResult bucket = evaluate_whatif(in, {}, e, rb);
  ASSERT_TRUE(bucket.modified) << bucket.error;
  direct = demo_zero3();
  direct.zero.reduce_bucket = 1'000'000'000;
  EXPECT_EQ(bucket.modified->step_time_s, planner::simulate_plan(*l.space, direct).step_time_s);
  spec::Plan z1 = demo_zero3();
  z1.zero.stage = 1;
  PlanEdits pf;
  pf.prefetch_bucket = 1'000'000;
  EXPECT_FALSE(edit_plan(z1, 1024, pf).plan.has_value());
}

TEST(WhatIfPanel, TenQuickEditsCauseOneSimulation) {
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  WhatIfPanel panel;
  panel.set_context(in, l.cluster, r.top.front(), {});
  QSignalSpy done(&panel, &WhatIfPanel::evaluated);
  for (int i = 1; i <= 10; ++i) panel.set_value("cluster.inter_node.nic_bandwidth_Bps", 10.0 * i);
  ASSERT_TRUE(test::wait_for([&] { return done.count() >= 1; }));
  QTest::qWait(300);
  EXPECT_LE(panel.evaluations(), 2);
  EXPECT_EQ(done.count(), panel.evaluations());
  ASSERT_TRUE(panel.result() && panel.result()->modified);
  ASSERT_EQ(panel.edits().size(), 1u);
  EXPECT_EQ(panel.edits()[0].value.get<double>(), 100.0 * 1e9 / 8) << "the last value edited";
}

// The demo's hand-written plan (tp8 pp2, ZeRO-1) against the ZeRO-3 one from 25 to 400 Gb/s per
// NIC: ZeRO-3's all-gathers make it the slower at low bandwidth and the faster at high; each
// marker lies strictly between the two sweep values that bracket the change.
TEST(WhatIfPanel, SweepMarksWhereTheFastestPlanChanges) {
  const Inputs in = demo_inputs();
  const Loaded l = load(in);
  const spec::Plan hand = spec::load_plan(spec::resolve_config(spec::ConfigKind::kPlan, "demo-13b"));
  const planner::Evaluated z3 = evaluated(l, demo_zero3());
  WhatIfPanel panel;
  panel.set_context(in, l.cluster, z3, {{planner::plan_key(hand), hand}, {z3.key, z3.plan}});
  QSignalSpy done(&panel, &WhatIfPanel::sweep_done);
  panel.run_sweep("cluster.inter_node.nic_bandwidth_Bps", 25, 400, 5);
  ASSERT_TRUE(test::wait_for([&] { return done.count() == 1; }, 60000));
  const planner::Sweep& s = *panel.sweep();
  ASSERT_EQ(s.points.size(), 5u);
  ASSERT_FALSE(s.changes.empty()) << "the two plans cross between 25 and 400 Gb/s";
  ASSERT_EQ(panel.change_markers().size(), s.changes.size());
  for (std::size_t k = 0; k < s.changes.size(); ++k) {
    const std::size_t i = s.changes[k];
    const double lo = spec::parse_value(s.points[i - 1].value).get<double>() * 8 / 1e9;
    const double hi = spec::parse_value(s.points[i].value).get<double>() * 8 / 1e9;
    EXPECT_GT(panel.change_markers()[k], lo);
    EXPECT_LT(panel.change_markers()[k], hi);
  }
  EXPECT_EQ(s.points.front().best, 0) << "at 25 Gb/s the hand plan (less data-parallel traffic) wins";
  EXPECT_EQ(s.points.back().best, 1) << "at 400 Gb/s ZeRO-3 wins";
}

}  // namespace
}  // namespace stagecraft::gui
