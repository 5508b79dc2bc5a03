// What limits a plan, in words (sim/report.hpp): the largest of the three terms that partition
// the step, with its share; the memory peak against capacity with its largest kind.
#include "sim/report.hpp"

#include <gtest/gtest.h>

namespace stagecraft::sim {
namespace {

Metrics report_metrics(double compute, double exposed, double bubble) {
  Metrics m;
  m.time.compute_s = compute;
  m.time.exposed_comm_s = exposed;
  m.time.bubble_s = bubble;
  m.time.tp_s = 0.25;
  m.time.pp_s = 0.125;
  m.time.dp_s = 0.5;
  m.step_time_s = compute + exposed + bubble;   // the three partition the step
  m.mfu = 0.45;
  m.capacity_bytes = int64_t{80} << 30;
  m.peak_memory_bytes = int64_t{60} << 30;
  m.memory[trace::MemoryKind::kParams] = int64_t{10} << 30;
  m.memory[trace::MemoryKind::kOptimizer] = int64_t{40} << 30;
  m.memory[trace::MemoryKind::kActivations] = int64_t{10} << 30;
  return m;
}

TEST(Report, LimitIsTheLargestTermWithItsShare) {
  std::string term;
  // 1.2 of a 1.2 + 0.2 + 0.1 = 1.5 s step is 80%.
  const std::string compute = limit_text(report_metrics(1.2, 0.2, 0.1), &term);
  EXPECT_EQ(term, "compute");
  EXPECT_EQ(compute.rfind("limited by compute: 1.200 s of the 1.500 s step (80%), at 45% MFU; compute 1.200 s, "
                          "exposed communication 0.200 s, bubble 0.100 s; communication lanes busy: tp 0.250 s, "
                          "pp 0.125 s, dp 0.500 s", 0), 0u)
      << compute;
  // 0.6 of 0.3 + 0.6 + 0.1 = 1.0 s is 60%; MFU is said only when compute limits.
  const std::string comm = limit_text(report_metrics(0.3, 0.6, 0.1), &term);
  EXPECT_EQ(term, "exposed communication");
  EXPECT_EQ(comm.rfind("limited by exposed communication: 0.600 s of the 1.000 s step (60%); ", 0), 0u) << comm;
  limit_text(report_metrics(0.3, 0.1, 0.7), &term);
  EXPECT_EQ(term, "pipeline bubble");
}

TEST(Report, MemoryNamesThePeakAndItsLargestKind) {
  // 60 of 80 GiB is 75%; optimizer states (40 GiB) are the largest kind.
  EXPECT_EQ(memory_text(report_metrics(1, 0, 0)),
            "peak memory 60.0 GiB of 80.0 GiB (75%), largest term optimizer states 40.0 GiB");
  EXPECT_NE(report_text(report_metrics(1.2, 0.2, 0.1), spec::Plan{}, 8, "c").find("limits      limited by compute"),
            std::string::npos);
}

TEST(Report, StageMemoryTakesEachStagesLargestRank) {
  // tp 2 × pp 2 × dp 1: ranks 0, 1 are stage 0 and ranks 2, 3 stage 1 (rank = (stage·dp + d)·tp + t).
  program::Placement placement;
  placement.tp = 2;
  placement.pp = 2;
  const auto sample = [](int64_t rank, int64_t gib_activations) {
    trace::MemorySample s;
    s.rank = rank;
    s.time_ns = 1000 * rank;
    s.bytes[trace::MemoryKind::kParams] = int64_t{2} << 30;
    s.bytes[trace::MemoryKind::kActivations] = gib_activations << 30;
    return s;
  };
  // Stage 0 keeps more activations (1F1B: pp in flight on the first stage), rank 1 the most.
  const std::vector<StageMemory> stages = stage_memory({sample(0, 10), sample(1, 12), sample(2, 5), sample(3, 4)}, placement);
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].stage, 0);
  EXPECT_EQ(stages[0].rank, 1);
  EXPECT_EQ(stages[0].total(), int64_t{2 + 12} << 30);
  EXPECT_EQ(stages[1].rank, 2);
  EXPECT_EQ(stages[1].total(), int64_t{2 + 5} << 30);
  const std::string table = stage_memory_text(stages, int64_t{80} << 30);
  EXPECT_NE(table.find("14.0 / 80.0  <- the tightest"), std::string::npos) << table;
  EXPECT_NE(table.find("    7.0 / 80.0\n"), std::string::npos) << table;
  const nlohmann::json j = to_json(stages);
  EXPECT_EQ(j[1]["memory"]["activations"], int64_t{5} << 30);
  EXPECT_DOUBLE_EQ(j[0]["time_s"].get<double>(), 1e-6);
}

}  // namespace
}  // namespace stagecraft::sim
