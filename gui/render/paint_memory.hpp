// Painting one rank's memory over the step (gui/model/memory_series.hpp) on the timeline's time
// axis: per pixel column the stack of the sample MemoryStack::columns picks, bottom to top
// reserved, params, grads, optimizer, buffers, activations; the GPU's capacity as a dashed line;
// the peak marked with its value, time and instruction. The y scale runs from 0 to 1.08 × the
// larger of capacity and peak.
#pragma once

#include <QPainter>
#include <QRect>

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <string>

#include "core/trace/memory.hpp"
#include "gui/model/memory_series.hpp"
#include "gui/render/paint_timeline.hpp"

namespace stagecraft::gui {

// Bottom-to-top stacking order.
inline constexpr std::array<trace::MemoryKind, trace::kMemoryKindCount> kStackOrder = {
    trace::MemoryKind::kReserved,  trace::MemoryKind::kParams,  trace::MemoryKind::kGrads,
    trace::MemoryKind::kOptimizer, trace::MemoryKind::kBuffers, trace::MemoryKind::kActivations};

struct MemoryPlot {
  int left = 0, width = 1, top = 0, height = 1;   // the plot area in the painter's coordinates
  double max_bytes = 1;
  int y_of(double bytes) const;
};

MemoryPlot memory_plot(const QRect& area, const TimelineStyle& style, const MemoryStack& s, int64_t capacity_bytes);

void paint_memory(QPainter& g, const QRect& area, const TimelineStyle& style, const MemoryStack& s, int64_t capacity_bytes,
                  const TimeWindow& window, const std::string& peak_note,
                  std::optional<std::pair<int64_t, int64_t>> range = std::nullopt);

}  // namespace stagecraft::gui
