// Colours, fonts and time ticks shared by every painted view and export: op colours come from
// render/colours.hpp (the PNG writer's table, keyed by Program op), memory kinds have their own.
#pragma once

#include <QColor>
#include <QString>

#include <cstdint>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/trace/memory.hpp"

namespace stagecraft::gui {

QColor op_colour(program::Op op);
// The colour of a timeline kind (traces::kKindCount): an op's, or a kernel class's.
QColor kind_colour(int kind);
QColor memory_colour(trace::MemoryKind kind);
// A receive's waiting part: its colour, faded.
QColor waiting_colour(program::Op op);

// "F", "B", "Bi", "W", "R" (schedule cells) and "" for non-compute ops.
QString op_letter(program::Op op);

// Ticks for a time axis over [t0, t1) ns: a 1-2-5 step giving about `target` ticks.
struct TimeTick {
  int64_t t = 0;
  QString label;
};
std::vector<TimeTick> time_ticks(int64_t t0, int64_t t1, int target);
// "12.3 ms", "1.204 s", "850 us"
QString time_text(double ns);

}  // namespace stagecraft::gui
