// Timeline of traces for `stagecraft compare --png`: each trace a panel, one above the other,
// one row per rank and lane (Stagecraft traces) or rank and stream (PyTorch traces), one bar per
// event coloured by its kind, on a time axis shared by the panels so that equal durations have
// equal lengths. The layout is plain data (testable), and all of it: drawing it is not an
// analysis library's job (render/timeline_png.hpp paints it with Qt; a GUI can paint the same
// panels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct TimelineBar {
  int row = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string kind;        // trace kind or kernel class: picks the colour
};

struct TimelinePanel {
  std::string title;
  std::vector<std::string> rows;   // "rank 0 compute", "rank 1 stream 7", ...
  std::vector<TimelineBar> bars;
  int64_t end_ns = 0;              // last event end
};

// Only the first step of a multi-step trace (the one a simulated trace has).
TimelinePanel timeline_panel(const Trace& t, const std::string& title);

}  // namespace stagecraft::traces
