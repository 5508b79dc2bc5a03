// Painting one step's timeline (traces::TimelineModel) with QPainter — the one routine the screen,
// the PNG and the SVG exports use, so an export looks like the screen.
//
// Layout (layout_timeline, plain data): a ruler on top, then per rank a group of rows — its compute
// lane taller, communication lanes thinner (only lanes with events exist); in the schedule view
// only compute rows, taller, with the micro-batch number in each cell (the papers' figures).
// Bars: one per event in its op's colour (gui/render/palette.hpp); a receive drawn faded from its
// post until its send began (waiting) and solid from then (transfer). Where a row has more events
// in view than pixels, it is drawn per pixel column (TimelineModel::columns): the column's dominant
// op, as tall as the column is busy — so no busy time disappears at any zoom.
#pragma once

#include <QColor>
#include <QPainter>
#include <QRect>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "traces/timeline_model.hpp"

namespace stagecraft::gui {

struct TimelineStyle {
  int label_width = 150;
  int ruler_height = 22;
  int compute_height = 20;
  int lane_height = 14;
  int schedule_height = 26;
  int rank_gap = 5;
  bool schedule = false;       // compute rows only, with micro-batch numbers
};

struct TimelineLayout {
  struct Row {
    int model_row = 0;
    int y = 0, height = 0;
    bool first_of_rank = false;
  };
  std::vector<Row> rows;
  int height = 0;              // total, ruler included
};

TimelineLayout layout_timeline(const traces::TimelineModel& m, const TimelineStyle& style);

// The visible time window [t0, t1) in ns from the step's origin.
struct TimeWindow {
  int64_t t0 = 0, t1 = 1;
  double x_of(int64_t t, int left, int width) const;
  int64_t t_of(double x, int left, int width) const;
};

struct TimelineMark {
  int row = -1;                // model row of the selected event
  std::size_t index = 0;
};

// What is drawn over the bars: the selected event outlined, a selected time range shaded, and
// arrows from each send's start to its receive's end (a selected pipeline message).
struct TimelineOverlay {
  std::optional<TimelineMark> selected;
  std::optional<std::pair<int64_t, int64_t>> range;
  std::vector<std::pair<TimelineMark, TimelineMark>> arrows;   // (send, receive)
  // Overlay mode (Compare): a colour per event in place of its op's (its error), and a ghost per
  // event — the simulated counterpart's interval — outlined in the row's upper part.
  std::function<std::optional<QColor>(std::size_t row, std::size_t index)> colour;
  std::function<std::optional<std::pair<int64_t, int64_t>>(std::size_t row, std::size_t index)> ghost;
};

void paint_timeline(QPainter& g, const QRect& area, const traces::TimelineModel& m, const TimelineLayout& layout,
                    const TimelineStyle& style, const TimeWindow& window, const TimelineOverlay& overlay = {});

// The model row under y (in area coordinates), or -1.
int row_at(const TimelineLayout& layout, int y);

}  // namespace stagecraft::gui
