// compare: a trace against itself, against known distortions of itself, against the full
// simulation, against PyTorch traces; mismatches are errors that name the file and pointer.
#include "traces/compare.hpp"
#include "traces/compare_plans.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "support.hpp"

namespace stagecraft::traces {
namespace {

using program::Op;

struct CompareTest : ::testing::Test {
  test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  spec::Cluster cluster = test::cpu_cluster(4);
  sim::SimResult result = test::simulate(s, cluster);
  Trace sim = test::as_trace(result.trace, "sim.json");
};

// Every time ×k (durations, spans, the partition of the step), repeated over `steps` steps.
trace::Trace scaled(const trace::Trace& t, double k, int steps) {
  trace::Trace out = t;
  out.source = "measured";
  out.events.clear();
  out.memory.clear();
  int64_t span = 0;
  for (const trace::Event& e : t.events) span = std::max(span, e.end_ns);
  const int64_t period = std::llround(static_cast<double>(span) * k) + 1000;
  for (int s = 0; s < steps; ++s) {
    for (trace::Event e : t.events) {
      e.start_ns = std::llround(static_cast<double>(e.start_ns) * k) + s * period;
      e.end_ns = std::llround(static_cast<double>(e.end_ns) * k) + s * period;
      out.events.push_back(e);
    }
  }
  return out;
}

TEST_F(CompareTest, ATraceAgainstItselfHasNoErrorAndTheSimulatorsBreakdown) {
  const Comparison c = compare(sim, sim);
  EXPECT_EQ(c.level, Level::kInstruction);
  EXPECT_DOUBLE_EQ(c.step_error(), 0.0);
  EXPECT_NEAR(c.step_simulated_s, result.metrics.step_time_s, 1e-9);
  for (const auto& [kind, k] : c.kinds) EXPECT_DOUBLE_EQ(k.error(), 0.0) << kind;
  // The partition computed from the trace is the simulator's own (sim/simulator.hpp "Breakdown").
  EXPECT_NEAR(c.simulated.compute_s, result.metrics.time.compute_s, 1e-9);
  EXPECT_NEAR(c.simulated.exposed_comm_s, result.metrics.time.exposed_comm_s, 1e-9);
  EXPECT_NEAR(c.simulated.bubble_s, result.metrics.time.bubble_s, 1e-9);
  EXPECT_EQ(c.unmatched_simulated, 0);
  EXPECT_EQ(c.matched, static_cast<int64_t>(result.trace.events.size()) - 0);
}

TEST_F(CompareTest, AMeasuredRunThatIsUniformlySlowerGivesThatError) {
  // measured = simulated × 1.25 over two steps: error = 1/1.25 − 1 = −0.2 everywhere.
  const Trace meas = test::as_trace(scaled(result.trace, 1.25, 2), "measured.json");
  const Comparison c = compare(sim, meas);
  EXPECT_EQ(c.measured_steps, 2);
  EXPECT_NEAR(c.step_error(), 1 / 1.25 - 1, 1e-6);
  for (const auto& [kind, k] : c.kinds) {
    if (k.measured_s > 0) {
      // each scaled duration is rounded to the ns: at most 1 ns per item against the kind's total
      EXPECT_NEAR(k.error(), -0.2, 1e-6 + static_cast<double>(k.count) * 1e-9 / k.measured_s) << kind;
    }
  }
  EXPECT_NEAR(c.measured.compute_s, 1.25 * c.simulated.compute_s, 1e-8);
  EXPECT_NEAR(c.measured.bubble_s, 1.25 * c.simulated.bubble_s, 1e-8);
  EXPECT_NEAR(c.measured.exposed_comm_s, 1.25 * c.simulated.exposed_comm_s, 1e-8);
}

TEST_F(CompareTest, ErrorsArePerKindAndTheWorstInstructionsComeFirst) {
  trace::Trace t = result.trace;
  t.source = "measured";
  for (trace::Event& e : t.events) {
    if (e.op == Op::kBackward) e.end_ns = e.start_ns + 2 * (e.end_ns - e.start_ns);
  }
  const Comparison c = compare(sim, test::as_trace(t, "measured.json"));
  EXPECT_NEAR(c.kinds.at("backward").error(), 1 / 2.0 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(c.kinds.at("forward").error(), 0.0);
  EXPECT_DOUBLE_EQ(c.kinds.at("send").error(), 0.0);
  ASSERT_EQ(c.worst.size(), 5u);
  double previous = INFINITY;
  for (const WorstItem& w : c.worst) {
    EXPECT_EQ(w.kind, "backward");
    EXPECT_NEAR(w.measured_s, 2 * w.simulated_s, 1e-12);
    EXPECT_LE(w.measured_s - w.simulated_s, previous);
    previous = w.measured_s - w.simulated_s;
  }
  // SCHEMAS.md "compare --json"
  const nlohmann::json j = to_json(c);
  for (const char* key : {"simulated", "measured", "error"}) EXPECT_TRUE(j["step_time_s"].contains(key)) << key;
  for (const char* key : {"simulated_s", "measured_s", "error"}) EXPECT_TRUE(j["kinds"]["backward"].contains(key)) << key;
  for (const char* key : {"instr", "rank", "kind", "simulated_s", "measured_s"}) EXPECT_TRUE(j["worst"][0].contains(key)) << key;
  EXPECT_NEAR(j["kinds"]["backward"]["error"].get<double>(), -0.5, 1e-12);
}

TEST_F(CompareTest, EveryMeasuredRankAlignsWithTheSimulatedReplica) {
  // The replica simulation runs ranks 0 and 2 (tp rank 0 of dp replica 0 on stages 0 and 1);
  // measured ranks 1 and 3 are their data-parallel peers.
  trace::Trace full = test::simulate(s, cluster, /*full=*/true).trace;
  full.source = "measured";
  const Comparison c = compare(sim, test::as_trace(full, "full.json"));
  ASSERT_EQ(c.ranks.size(), 4u);
  EXPECT_EQ(c.ranks[1].simulated_rank, 0);
  EXPECT_EQ(c.ranks[3].simulated_rank, 2);
  EXPECT_DOUBLE_EQ(c.kinds.at("forward").error(), 0.0);  // compute is the same on every replica
  EXPECT_DOUBLE_EQ(c.kinds.at("backward").error(), 0.0);
}

TEST_F(CompareTest, DifferentPlansAreAnError) {
  test::Scenario other = s;
  other.plan.schedule = spec::Schedule::kGpipe;
  other.program = program::lower(other.model, other.training, other.plan);
  const Trace meas = test::as_trace(test::simulate(other, cluster).trace, "gpipe.json");
  test::expect_spec_error([&] { compare(sim, meas); }, "/stagecraft/plan/schedule", "different plans");
}

TEST_F(CompareTest, TwoPlansSideBySideGiveEachSidesOwnNumbers) {
  // A: the pp2 dp2 plan as simulated; B: the same trace × 1.5 over two steps, as another plan
  // (gpipe) would be. Each side's figures are its own: B's step time, per-kind totals and per-stage
  // compute are 1.5 × A's, so every ratio B / A is 1.5 (to the nanosecond rounding).
  test::Scenario other = s;
  other.plan.schedule = spec::Schedule::kGpipe;
  other.program = program::lower(other.model, other.training, other.plan);
  const Trace gpipe = test::as_trace(test::simulate(other, cluster).trace, "gpipe.json");
  const PlanComparison c = compare_plans(sim, gpipe);
  EXPECT_EQ(c.level, Level::kInstruction);
  EXPECT_NEAR(c.a.step_s, result.metrics.step_time_s, 1e-9);
  EXPECT_EQ(c.a.plan, spec::summary(s.plan));
  EXPECT_EQ(c.b.plan, spec::summary(other.plan));
  EXPECT_EQ(c.a.world, 4);
  // pp2 dp2 tp1: the simulated replica is ranks 0 (stage 0) and 2 (stage 1)
  ASSERT_EQ(c.a.stages.size(), 2u);
  EXPECT_EQ(c.a.stages[1].stage, 1);
  // the breakdown partitions each side's step as the simulator does
  EXPECT_NEAR(c.a.breakdown.compute_s, result.metrics.time.compute_s, 1e-9);
  EXPECT_NEAR(c.a.breakdown.bubble_s, result.metrics.time.bubble_s, 1e-9);
  // the per-stage peak is each stage's rank peak, the largest of them the plan's
  EXPECT_EQ(std::max(c.a.stages[0].peak_memory_bytes, c.a.stages[1].peak_memory_bytes), result.metrics.peak_memory_bytes);
  // forward work is the same in both schedules: same per-GPU forward total
  EXPECT_NEAR(c.a.kinds.at("forward"), c.b.kinds.at("forward"), 1e-9);

  const Trace slower = test::as_trace(scaled(result.trace, 1.5, 2), "slower.json");
  const PlanComparison k = compare_plans(sim, slower);
  EXPECT_EQ(k.b.steps, 2);
  EXPECT_NEAR(k.b.step_s / k.a.step_s, 1.5, 1e-6);
  EXPECT_NEAR(k.b.kinds.at("backward") / k.a.kinds.at("backward"), 1.5, 1e-6);
  EXPECT_NEAR(k.b.stages[0].breakdown.compute_s / k.a.stages[0].breakdown.compute_s, 1.5, 1e-6);
  EXPECT_EQ(k.b.stages[0].peak_memory_bytes, -1);   // scaled() drops the memory samples
  const nlohmann::json j = to_json(k);
  EXPECT_NEAR(j["step_time_ratio"].get<double>(), 1.5, 1e-6);
  EXPECT_TRUE(j["b"]["stages"][0]["peak_memory_bytes"].is_null());
  EXPECT_NE(to_text(k).find("B / A"), std::string::npos);
}

TEST_F(CompareTest, AnInstructionThePlanDoesNotHaveIsAnError) {
  trace::Trace t = result.trace;
  t.events[3].instr = 99999;
  const Trace meas = test::as_trace(t, "bad.json");
  test::expect_spec_error([&] { compare(sim, meas); }, meas.event_pointer(3) + "/args/instr", "does not exist");
}

// A measured trace cut short or filtered (here: rank 0's backward passes left out) measures part of
// the step; compared, it read as a large simulator error. It is refused, naming how many of the
// instructions of the ranks it covers are missing and the first of them.
TEST_F(CompareTest, AMeasuredTraceMissingInstructionsIsRefusedNamingThem) {
  trace::Trace t = result.trace;
  t.source = "measured";
  const std::size_t all = t.events.size();  // one step of the replica's ranks 0 and 2: an event each
  std::erase_if(t.events, [](const trace::Event& e) { return e.rank == 0 && e.op == Op::kBackward; });
  const std::size_t cut = all - t.events.size();
  ASSERT_GT(cut, 0u);
  const Trace meas = test::as_trace(t, "cut.json");
  test::expect_spec_error([&] { compare(sim, meas); }, "/traceEvents",
                          std::to_string(cut) + " of " + std::to_string(all) + " are missing (#");
}

TEST_F(CompareTest, PyTorchTracesAlignByStepAndKernelClass) {
  // tests/data/kineto/handwritten_rank{0,1}.json: per step, compute 100 + 12 µs on rank 0 and
  // 125 + 12 on rank 1, memory 10 + 2, communication 60; ProfilerStep spans of 300 µs.
  const Trace meas = read_trace_files({test::data_path("kineto/handwritten_rank0.json"),
                                       test::data_path("kineto/handwritten_rank1.json")});
  const Comparison c = compare(sim, meas);
  EXPECT_EQ(c.level, Level::kKernelClass);
  EXPECT_NEAR(c.kinds.at("compute").measured_s, (112 + 137) / 2.0 * 1e-6, 1e-12);
  EXPECT_NEAR(c.kinds.at("memory").measured_s, 12e-6, 1e-12);
  EXPECT_NEAR(c.kinds.at("communication").measured_s, 60e-6, 1e-12);
  EXPECT_NEAR(c.step_measured_s, 300e-6, 1e-12);
  ASSERT_EQ(c.ranks.size(), 2u);
  EXPECT_EQ(c.ranks[1].simulated_rank, 0);  // rank 1 = stage 0, dp replica 1
  // compute + memory kernels on one stream do not overlap communication on rank 0:
  // exposed communication = 60 µs, compute = 124 µs, bubble = 300 − 184 µs.
  EXPECT_NEAR(c.ranks[0].measured.exposed_comm_s, 60e-6, 1e-12);
  EXPECT_NEAR(c.ranks[0].measured.bubble_s, (300 - 124 - 60) * 1e-6, 1e-12);
}

}  // namespace
}  // namespace stagecraft::traces
