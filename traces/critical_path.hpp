// The critical path of one simulated (or measured) step: the chain of instructions that sets its
// length, walked back from the last instruction to end by the simulator's own start rule
// (docs/simulator.md: an instruction starts when the previous one on its lane and its explicit
// dependencies are done, at the latest end among them) — so each step back goes to the
// predecessor that ended last — and, where a receive waited for its send (its transfer began at
// the send's start, traces::activities' busy_from), to that send on the peer rank.
//
// Accounting: walking back, each link releases its successor at a time (a predecessor's end, or
// for a message the send's start), so the path cuts [0, step end) into consecutive intervals, one
// per instruction on it: the part of an interval inside its instruction is that instruction's time
// (compute or communication by its lane), the rest is waiting that no Program dependency explains
// (a collective waiting for its other members, a send not started yet). The three add up to the
// step. What is not modelled as a link (a collective's members on other ranks) shows as waiting,
// never as a wrong predecessor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "traces/program_context.hpp"
#include "traces/timeline_model.hpp"

namespace stagecraft::traces {

struct CriticalStep {
  std::size_t row = 0, index = 0;   // the instruction (TimelineModel row and event)
  std::string via;                  // how its successor depends on it: "lane", "dependency", "message"; "" for the last
  int64_t from_ns = 0, to_ns = 0;   // its interval of the path
  int64_t busy_ns = 0;              // of that, inside the instruction
};

struct CriticalPath {
  std::vector<CriticalStep> steps;  // in time order; the last ends the step
  int64_t end_ns = 0;
  int64_t compute_ns = 0, communication_ns = 0, other_ns = 0, wait_ns = 0;   // add up to end_ns
};

// Empty for a kernel-level (PyTorch profiler) trace: its kernels carry no Program dependencies.
CriticalPath critical_path(const TimelineModel& m, const ProgramContext& pc);

}  // namespace stagecraft::traces
