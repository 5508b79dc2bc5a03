// The step views (docs/gui.md "Timeline", "Memory"): a Gantt of one simulated step and the memory
// of one rank under it, on one time axis (TimeAxis): zoom about the cursor with the wheel or W/S,
// pan by dragging or A/D (a quarter of the view per key press), F or double-click fits the step.
// Hovering names the instruction (PlanView::tooltip); a click selects it. Both paint with the
// routines of gui/render, which the PNG and SVG exports call too.
#pragma once

#include <QWidget>

#include <optional>

#include "gui/jobs/plan_job.hpp"
#include "gui/render/paint_timeline.hpp"
#include "traces/critical_path.hpp"

namespace stagecraft::gui {

class TimeAxis : public QObject {
  Q_OBJECT
 public:
  using QObject::QObject;
  const TimeWindow& window() const { return window_; }
  int64_t end_ns() const { return end_ns_; }
  void set_end(int64_t end_ns);                 // a new step: fits it
  void set_window(int64_t t0, int64_t t1);      // clamped to [0, end] with at least 1 us... or 1 ns of span
  void fit() { set_window(0, end_ns_); }
  // Zooms by `factor` (< 1 zooms in) keeping time `anchor` at the same place.
  void zoom(double factor, int64_t anchor);
  void pan(double fraction);                    // of the visible span; positive moves later
  // A selected time range (Shift + drag on the timeline), shaded on every view of this axis.
  const std::optional<std::pair<int64_t, int64_t>>& range() const { return range_; }
  void set_range(std::optional<std::pair<int64_t, int64_t>> range);

 signals:
  void changed();
  void range_changed();

 private:
  std::optional<std::pair<int64_t, int64_t>> range_;
  TimeWindow window_;
  int64_t end_ns_ = 1;
};

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  TimelineView(TimeAxis* axis, QWidget* parent = nullptr);

  void set_view(PlanViewPtr view);
  const PlanViewPtr& view() const { return view_; }
  void set_schedule(bool on);
  // Highlights the step's critical path (traces::critical_path): the other bars faded.
  void set_critical_path(bool on);
  const std::optional<traces::CriticalPath>& critical_path() const { return critical_; }
  bool schedule() const { return style_.schedule; }
  const TimelineStyle& style() const { return style_; }
  const TimelineLayout& layout() const { return layout_; }
  std::optional<TimelineMark> selected() const { return selected_; }
  void select(std::optional<TimelineMark> mark);
  // Overlay mode: colours and ghosts per event (TimelineOverlay); empty functions turn it off.
  void set_overlay(std::function<std::optional<QColor>(std::size_t, std::size_t)> colour,
                   std::function<std::optional<std::pair<int64_t, int64_t>>(std::size_t, std::size_t)> ghost);
  // The event under a widget position, if any.
  std::optional<TimelineMark> event_at(const QPoint& pos) const;
  // The x of time t (ns from the step's origin) in widget coordinates.
  double x_of(int64_t t) const;
  QSize sizeHint() const override;

 signals:
  void instruction_selected(int row, qulonglong index);
  void range_selected();   // Shift + drag ended: TimeAxis::range() holds it

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;

 private:
  int plot_left() const { return style_.label_width; }
  int plot_width() const { return std::max(1, width() - style_.label_width - 4); }

  TimeAxis* axis_;
  PlanViewPtr view_;
  TimelineStyle style_;
  TimelineLayout layout_;
  std::optional<TimelineMark> selected_;
  std::optional<traces::CriticalPath> critical_;
  std::function<std::optional<QColor>(std::size_t, std::size_t)> overlay_colour_;
  std::function<std::optional<std::pair<int64_t, int64_t>>(std::size_t, std::size_t)> overlay_ghost_;
  QPoint press_;
  int64_t press_t0_ = 0;
  bool dragged_ = false;
  bool ranging_ = false;
  int64_t range_from_ = 0;
};

class MemoryView : public QWidget {
  Q_OBJECT
 public:
  MemoryView(TimeAxis* axis, QWidget* parent = nullptr);

  void set_view(PlanViewPtr view);   // shows the plan's peak rank
  void set_rank(int64_t rank);
  int64_t rank() const { return stack_.rank; }
  const MemoryStack& stack() const { return stack_; }
  const TimelineStyle& style() const { return style_; }
  std::string peak_note() const;
  QSize sizeHint() const override;

 signals:
  // A click: the instruction whose change the sample under the cursor records.
  void instruction_clicked(qlonglong rank, int instr);

 protected:
  void paintEvent(QPaintEvent*) override;
  void mousePressEvent(QMouseEvent* e) override;
  void wheelEvent(QWheelEvent* e) override;

 private:
  TimeAxis* axis_;
  PlanViewPtr view_;
  MemoryStack stack_;
  TimelineStyle style_;
};

}  // namespace stagecraft::gui
