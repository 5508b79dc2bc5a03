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

std::string table_header();
std::string table_cells(const Metrics& m);

}  // namespace stagecraft::sim
