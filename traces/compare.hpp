// compare: a simulated trace against a measured one (stagecraft compare SIM MEASURED, SCHEMAS.md
// "compare --json"). Not a statistical test; a side-by-side of where the time goes.
//
// Alignment. Two Stagecraft traces align by Program instruction id: measured (rank r, instr i)
// with simulated (r', i), where r' = r when the simulated trace has rank r, else the rank of the
// same pipeline stage that the simulator ran for it (one data-parallel replica, tp rank 0:
// placement.rank(stage_of(r), 0, 0)). Their plans must be equal. When either side is a PyTorch
// trace (Kineto, autograd profiler) the alignment is by rank, step and kernel class (compute,
// communication, memory; a Stagecraft trace's lanes map to those classes).
// Values. A measured run repeats its step; per item (an instruction, or a class on a rank) the
// measured value is the median over steps of its per-step duration (summed over kernels at
// kernel level), likewise the simulated one.
//   per kind  total   = Σ over a rank's items of that kind, averaged over ranks
//             median  = median over items
//             error   = simulated / measured − 1            (−0.1: the simulator is 10% fast)
//   step time: median over steps of the step's span over all ranks; error as above.
//   breakdown: compute, exposed communication, bubble (analysis.hpp), mean over ranks.
//   worst: the five items with the largest |simulated − measured|.
// Mismatches (different plans, an instruction the other trace lacks, a rank without
// counterpart) are spec::SpecError naming the measured file and the JSON pointer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/analysis.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct KindStats {
  double simulated_s = 0;         // per-rank total (mean over ranks)
  double measured_s = 0;
  double simulated_median_s = 0;  // median over items
  double measured_median_s = 0;
  int64_t count = 0;              // items
  double error() const;           // simulated_s / measured_s − 1; NaN when measured_s is 0
};

struct RankComparison {
  int64_t rank = 0;               // measured rank
  int64_t simulated_rank = 0;     // its counterpart
  std::map<std::string, KindStats> kinds;
  Breakdown simulated, measured;
};

struct WorstItem {
  int32_t instr = -1;             // -1 at kernel level
  int64_t rank = 0;
  std::string kind;
  double simulated_s = 0;
  double measured_s = 0;
};

struct Comparison {
  Level level = Level::kInstruction;
  std::string simulated_file, measured_file;
  std::string simulated_source, measured_source;
  int32_t simulated_steps = 0, measured_steps = 0;
  double step_simulated_s = 0, step_measured_s = 0;
  std::map<std::string, KindStats> kinds;
  Breakdown simulated, measured;  // mean over ranks
  std::vector<RankComparison> ranks;
  std::vector<WorstItem> worst;
  int64_t matched = 0;
  int64_t unmatched_simulated = 0;  // simulated items no measured item aligns with

  double step_error() const;
};

Comparison compare(const Trace& simulated, const Trace& measured);

// SCHEMAS.md "compare --json" plus level, breakdown, ranks and counts.
nlohmann::json to_json(const Comparison& c);
std::string to_text(const Comparison& c);

// Canonical order of kinds in reports: instruction kinds as the Program lists them, then classes.
std::vector<std::string> kind_order(const std::map<std::string, KindStats>& kinds);

// A number for the JSON reports: a non-finite value (an error with no measurement) is written as
// null, which JSON can carry and NaN it cannot.
nlohmann::json number_or_null(double v);
// Shared by compare and compare --plans: "1.234 s", "12.345 ms", "3.21 us", "0".
std::string seconds_text(double s);
// The mean over ranks of each term of a per-rank breakdown (all zero for none).
Breakdown mean_of(const std::map<int64_t, Breakdown>& by_rank);
// {step_s, compute_s, exposed_comm_s, bubble_s}
nlohmann::json to_json(const Breakdown& b);

}  // namespace stagecraft::traces
