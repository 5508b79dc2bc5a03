// Text renderings of Metrics (sim/metrics.hpp), shared by every command that prints a simulated
// plan — `simulate`, the planner's tables, `results` — so that the same number reads the same
// everywhere:
//   * report_text: the multi-line report of one plan (step time, time split, lanes, memory by
//     kind, fit);
//   * table_header / table_cells: the columns "step s, tokens/s, MFU, bubble, exposed comm s,
//     peak / capacity GiB" of one row of a plan table;
//   * limit_text / memory_text: what limits a plan (the largest of compute, exposed communication
//     and pipeline bubble, which partition the step) and its peak memory against capacity, in the
//     words `simulate` and search's best-plan explanation both print.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/plan.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::sim {

// `cluster` names where it ran; `world` is the plan's GPU count.
std::string report_text(const Metrics& m, const spec::Plan& plan, int64_t world, const std::string& cluster);

// "limited by compute: 1.234 s of the 1.500 s step (82%), at 45% MFU; compute ..., lanes ...";
// `term` (when not null) receives "compute", "exposed communication" or "pipeline bubble".
std::string limit_text(const Metrics& m, std::string* term = nullptr);
// "peak memory 61.2 GiB of 79.6 GiB (77%), largest term optimizer states 30.1 GiB".
std::string memory_text(const Metrics& m);

// Peak memory per pipeline stage: for each stage, the simulated rank of that stage with the
// largest peak and its bytes by kind (`peaks` from SimResult::rank_peaks).
struct StageMemory {
  int64_t stage = 0;
  int64_t rank = 0;
  int64_t time_ns = 0;            // when that rank peaks
  trace::MemoryBytes bytes;
  int64_t total() const { return bytes.total(); }
};
std::vector<StageMemory> stage_memory(const std::vector<trace::MemorySample>& peaks, const program::Placement& placement);
// The table: "stage  rank  params  grads  optimizer  activations  buffers  reserved  peak / capacity GiB",
// one row per stage, the tightest marked.
std::string stage_memory_text(const std::vector<StageMemory>& stages, int64_t capacity_bytes);
nlohmann::json to_json(const std::vector<StageMemory>& stages);

std::string table_header();
std::string table_cells(const Metrics& m);

}  // namespace stagecraft::sim
