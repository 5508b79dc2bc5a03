// Memory over one step for one rank (docs/gui.md "Memory"): the simulator's samples (bytes by
// kind, each held from its time until the next sample, and the instruction that changed it),
// stacked by kind, and decimated for drawing without losing the peak.
//
// Decimation: [t0, t1) is cut into n pixel columns; each column shows the sample with the largest
// total among those held during the column (the one holding at its start, and every one starting
// inside it). So the drawn maximum over any width is the simulated peak exactly, and a spike one
// sample long stays visible at every width (line-simplification methods such as LTTB may drop it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/trace/memory.hpp"
#include "core/trace/trace.hpp"

namespace stagecraft::gui {

struct MemoryStack {
  int64_t rank = 0;
  std::vector<int64_t> time_ns;              // from the step's origin, ascending
  std::vector<trace::MemoryBytes> bytes;     // held from time_ns[i] on
  std::vector<int32_t> instr;                // the instruction that changed it (-1: none)
  std::size_t peak = 0;                      // index of the largest total (the first of equal ones)

  bool empty() const { return time_ns.empty(); }
  int64_t peak_bytes() const { return empty() ? 0 : bytes[peak].total(); }
  // The sample held at t (the last with time_ns <= t); -1 before the first.
  int sample_at(int64_t t) const;
  // Per column, the index of the sample to draw (-1: none held).
  std::vector<int> columns(int64_t t0, int64_t t1, int n) const;
};

// The samples of `rank`, with times relative to origin_ns (the timeline's origin).
MemoryStack memory_of(const trace::Trace& t, int64_t rank, int64_t origin_ns);

}  // namespace stagecraft::gui
