// Text renderings of Metrics (sim/metrics.hpp), shared by every command that prints a simulated
// plan — `simulate`, the planner's tables, `results` — so that the same number reads the same
// everywhere:
//   * report_text: the multi-line report of one plan (step time, time split, lanes, memory by
//     kind, fit);
//   * table_header / table_cells: the columns "step s, tokens/s, MFU, bubble, exposed comm s,
//     peak / capacity GiB" of one row of a plan table.
#pragma once

#include <cstdint>
#include <string>

#include "core/spec/plan.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::sim {

// `cluster` names where it ran; `world` is the plan's GPU count.
std::string report_text(const Metrics& m, const spec::Plan& plan, int64_t world, const std::string& cluster);

std::string table_header();
std::string table_cells(const Metrics& m);

}  // namespace stagecraft::sim
