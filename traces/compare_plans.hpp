// compare --plans: two traces of different plans (simulated or measured, any mix) side by side.
// The Programs differ, so nothing is aligned by instruction; each side says what it spends:
//   step time        median over steps of the step's span over all ranks (analysis.hpp)
//   breakdown        compute, exposed communication, bubble: mean over ranks (analysis.hpp)
//   per kind         time per step in each kind, summed over a rank's items, median over steps,
//                    mean over ranks: per GPU, so plans of different sizes compare
//   per stage        the breakdown averaged over the ranks of each pipeline stage (a Stagecraft
//                    trace: stage_of(rank) by its plan's placement; a PyTorch trace has no stages:
//                    each rank is its own row), and the stage's peak memory when the trace has
//                    memory samples (the largest sample of any rank of the stage)
// Kinds are instruction kinds when both traces are Stagecraft traces, kernel classes (compute,
// communication, memory) when either is a PyTorch trace, as compare's alignment levels.
// ratio = b / a for every pair of numbers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/analysis.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct StageSpend {
  int64_t stage = 0;
  int64_t ranks = 0;                // ranks of the stage in the trace
  Breakdown breakdown;              // mean over them
  int64_t peak_memory_bytes = -1;   // -1: no memory samples
};

struct PlanSide {
  std::string file, source;
  std::string plan;                 // the plan in one line, "" when the trace names none
  int64_t world = 0;                // GPUs of the plan (ranks in the trace when it names no plan)
  int32_t steps = 0;
  double step_s = 0;
  Breakdown breakdown;
  std::map<std::string, double> kinds;   // seconds per step per GPU
  std::vector<StageSpend> stages;
};

struct PlanComparison {
  Level level = Level::kInstruction;
  PlanSide a, b;
};

PlanComparison compare_plans(const Trace& a, const Trace& b);
nlohmann::json to_json(const PlanComparison& c);
std::string to_text(const PlanComparison& c);

}  // namespace stagecraft::traces
