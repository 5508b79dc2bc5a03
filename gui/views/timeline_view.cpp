#include "gui/views/timeline_view.hpp"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <memory>
#include <set>
#include <cmath>

#include "core/program/format.hpp"
#include "core/text/format.hpp"
#include "gui/render/paint_memory.hpp"
#include "gui/render/palette.hpp"

namespace stagecraft::gui {

void TimeAxis::set_end(int64_t end_ns) {
  end_ns_ = std::max<int64_t>(1, end_ns);
  fit();
}

void TimeAxis::set_window(int64_t t0, int64_t t1) {
  // no closer than 100 ns per view (or the whole step, when it is shorter)
  const int64_t span = std::clamp<int64_t>(t1 - t0, std::min<int64_t>(100, end_ns_), end_ns_);
  t0 = std::clamp<int64_t>(t0, 0, end_ns_ - span);
  const TimeWindow w{t0, t0 + span};
  if (w.t0 == window_.t0 && w.t1 == window_.t1) return;
  window_ = w;
  emit changed();
}

void TimeAxis::set_range(std::optional<std::pair<int64_t, int64_t>> range) {
  if (range && range->second < range->first) std::swap(range->first, range->second);
  if (range == range_) return;
  range_ = range;
  emit range_changed();
}

void TimeAxis::zoom(double factor, int64_t anchor) {
  const double span = static_cast<double>(window_.t1 - window_.t0);
  const double left = static_cast<double>(anchor - window_.t0) / span;   // where the anchor sits, 0..1
  const double fresh = std::max(100.0, span * factor);
  const auto t0 = static_cast<int64_t>(std::llround(static_cast<double>(anchor) - left * fresh));
  set_window(t0, t0 + static_cast<int64_t>(std::llround(fresh)));
}

void TimeAxis::pan(double fraction) {
  const auto d = static_cast<int64_t>(std::llround(fraction * static_cast<double>(window_.t1 - window_.t0)));
  set_window(window_.t0 + d, window_.t1 + d);
}

TimelineView::TimelineView(TimeAxis* axis, QWidget* parent) : QWidget(parent), axis_(axis) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent);
  connect(axis_, &TimeAxis::changed, this, qOverload<>(&QWidget::update));
  connect(axis_, &TimeAxis::range_changed, this, qOverload<>(&QWidget::update));
}

void TimelineView::set_view(PlanViewPtr view) {
  const bool critical = critical_.has_value();
  view_ = std::move(view);
  selected_.reset();
  set_critical_path(critical);
  layout_ = view_ ? layout_timeline(view_->timeline, style_) : TimelineLayout{};
  if (view_) axis_->set_end(view_->timeline.end_ns());
  setMinimumHeight(std::min(layout_.height, 420));
  updateGeometry();
  update();
}

void TimelineView::set_critical_path(bool on) {
  critical_.reset();
  if (!on || !view_) {
    set_overlay({}, {});
    return;
  }
  critical_ = traces::critical_path(view_->timeline, view_->context);
  auto on_path = std::make_shared<std::set<std::pair<std::size_t, std::size_t>>>();
  for (const traces::CriticalStep& s : critical_->steps) on_path->insert({s.row, s.index});
  const PlanViewPtr v = view_;
  set_overlay(
      [on_path, v](std::size_t row, std::size_t i) -> std::optional<QColor> {
        if (on_path->count({row, i})) return std::nullopt;
        const QColor c = kind_colour(v->timeline.rows()[row].kind[i]);
        return QColor::fromRgbF(0.75f + 0.25f * c.redF(), 0.75f + 0.25f * c.greenF(), 0.75f + 0.25f * c.blueF()).lighter(115);
      },
      {});
}

void TimelineView::set_schedule(bool on) {
  style_.schedule = on;
  if (view_) layout_ = layout_timeline(view_->timeline, style_);
  updateGeometry();
  update();
}

void TimelineView::select(std::optional<TimelineMark> mark) {
  selected_ = mark;
  update();
}

void TimelineView::set_overlay(std::function<std::optional<QColor>(std::size_t, std::size_t)> colour,
                               std::function<std::optional<std::pair<int64_t, int64_t>>(std::size_t, std::size_t)> ghost) {
  overlay_colour_ = std::move(colour);
  overlay_ghost_ = std::move(ghost);
  update();
}

QSize TimelineView::sizeHint() const { return {900, std::max(120, layout_.height)}; }

double TimelineView::x_of(int64_t t) const { return axis_->window().x_of(t, plot_left(), plot_width()); }

std::optional<TimelineMark> TimelineView::event_at(const QPoint& pos) const {
  if (!view_ || pos.x() < plot_left()) return std::nullopt;
  const int row = row_at(layout_, pos.y());
  if (row < 0) return std::nullopt;
  const TimeWindow& w = axis_->window();
  const int64_t t = w.t_of(pos.x() + 0.5, plot_left(), plot_width());
  if (const auto i = view_->timeline.event_at(static_cast<std::size_t>(row), t)) return TimelineMark{row, *i};
  // a bar narrower than a pixel: the nearest event within 2 px
  const int64_t slack = w.t_of(plot_left() + 2.0, plot_left(), plot_width()) - w.t0;
  const auto [f, l] = view_->timeline.visible(static_cast<std::size_t>(row), t - slack, t + slack);
  if (f < l) return TimelineMark{row, f};
  return std::nullopt;
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter g(this);
  if (!view_) {
    g.fillRect(rect(), Qt::white);
    g.setPen(Qt::gray);
    g.drawText(rect(), Qt::AlignCenter, QStringLiteral("Select a plan to see one simulated step"));
    return;
  }
  TimelineOverlay overlay;
  overlay.selected = selected_;
  overlay.range = axis_->range();
  overlay.colour = overlay_colour_;
  overlay.ghost = overlay_ghost_;
  if (selected_) {
    if (const auto peer = view_->peer(static_cast<std::size_t>(selected_->row), selected_->index)) {
      const TimelineMark other{static_cast<int>(peer->first), peer->second};
      const bool is_send = program::is_send(view_->timeline.rows()[static_cast<std::size_t>(selected_->row)].op[selected_->index]);
      overlay.arrows.push_back(is_send ? std::make_pair(*selected_, other) : std::make_pair(other, *selected_));
    }
  }
  paint_timeline(g, rect(), view_->timeline, layout_, style_, axis_->window(), overlay);
}

bool TimelineView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* h = static_cast<QHelpEvent*>(e);
    if (const auto m = event_at(h->pos())) {
      QToolTip::showText(h->globalPos(), QString::fromStdString(view_->tooltip(static_cast<std::size_t>(m->row), m->index)), this);
    } else {
      QToolTip::hideText();
      e->ignore();
    }
    return true;
  }
  return QWidget::event(e);
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  if (steps == 0) return;
  const int64_t anchor = axis_->window().t_of(e->position().x(), plot_left(), plot_width());
  axis_->zoom(std::pow(0.5, steps), anchor);   // one notch halves (or doubles) the span
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  press_ = e->pos();
  press_t0_ = axis_->window().t0;
  dragged_ = false;
  ranging_ = (e->modifiers() & Qt::ShiftModifier) && e->button() == Qt::LeftButton;
  if (ranging_) range_from_ = axis_->window().t_of(e->position().x(), plot_left(), plot_width());
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (!(e->buttons() & Qt::LeftButton)) return;
  const int dx = e->pos().x() - press_.x();
  if (std::abs(dx) > 3) dragged_ = true;
  if (!dragged_) return;
  if (ranging_) {
    axis_->set_range(std::make_pair(range_from_, axis_->window().t_of(e->position().x(), plot_left(), plot_width())));
    return;
  }
  const TimeWindow& w = axis_->window();
  const double ns_per_px = static_cast<double>(w.t1 - w.t0) / plot_width();
  const auto t0 = press_t0_ - static_cast<int64_t>(std::llround(dx * ns_per_px));
  axis_->set_window(t0, t0 + (w.t1 - w.t0));
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  if (ranging_ && dragged_) {
    ranging_ = false;
    emit range_selected();
    return;
  }
  ranging_ = false;
  if (dragged_ || e->button() != Qt::LeftButton) return;
  axis_->set_range(std::nullopt);
  selected_ = event_at(e->pos());
  update();
  if (selected_) emit instruction_selected(selected_->row, selected_->index);
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* e) {
  if (const auto m = event_at(e->pos())) {
    const traces::TimelineRow& r = view_->timeline.rows()[static_cast<std::size_t>(m->row)];
    const int64_t pad = std::max<int64_t>(1, (r.end[m->index] - r.start[m->index]) / 10);
    axis_->set_window(r.start[m->index] - pad, r.end[m->index] + pad);
  } else {
    axis_->fit();
  }
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  const TimeWindow& w = axis_->window();
  const int64_t centre = (w.t0 + w.t1) / 2;
  switch (e->key()) {
    case Qt::Key_W: axis_->zoom(0.5, centre); break;
    case Qt::Key_S: axis_->zoom(2.0, centre); break;
    case Qt::Key_A: axis_->pan(-0.25); break;
    case Qt::Key_D: axis_->pan(0.25); break;
    case Qt::Key_F: axis_->fit(); break;
    case Qt::Key_Escape: axis_->set_range(std::nullopt); break;
    default: QWidget::keyPressEvent(e); return;
  }
  e->accept();
}

MemoryView::MemoryView(TimeAxis* axis, QWidget* parent) : QWidget(parent), axis_(axis) {
  setAttribute(Qt::WA_OpaquePaintEvent);
  connect(axis_, &TimeAxis::changed, this, qOverload<>(&QWidget::update));
  connect(axis_, &TimeAxis::range_changed, this, qOverload<>(&QWidget::update));
  setMinimumHeight(140);
}

QSize MemoryView::sizeHint() const { return {900, 180}; }

void MemoryView::set_view(PlanViewPtr view) {
  view_ = std::move(view);
  if (view_) {
    set_rank(view_->sim.metrics.peak_rank);
  } else {
    stack_ = {};
    update();
  }
}

void MemoryView::set_rank(int64_t rank) {
  if (!view_) return;
  stack_ = view_->memory(rank);
  update();
}

std::string MemoryView::peak_note() const {
  if (!view_ || stack_.empty()) return "no memory samples";
  std::string s = "rank " + std::to_string(stack_.rank) + " peak " + text::short_bytes(static_cast<double>(stack_.peak_bytes())) +
                  " at " + QString(time_text(static_cast<double>(stack_.time_ns[stack_.peak]))).toStdString();
  const int32_t instr = stack_.instr[stack_.peak];
  if (instr >= 0) {
    const program::RoleProgram& role = view_->context.program.role_of(stack_.rank);
    // "#242 Forward mb=0": the instruction, without its units and sizes
    std::string what = program::describe(view_->context.program, role, instr - role.first_id);
    const std::size_t cut = what.find(" units=");
    s += ", during " + (cut == std::string::npos ? what : what.substr(0, cut));
  }
  return s;
}

void MemoryView::paintEvent(QPaintEvent*) {
  QPainter g(this);
  if (!view_) {
    g.fillRect(rect(), Qt::white);
    return;
  }
  paint_memory(g, rect(), style_, stack_, view_->cluster.gpu.memory_bytes, axis_->window(), peak_note(), axis_->range());
}

void MemoryView::mousePressEvent(QMouseEvent* e) {
  if (!view_ || stack_.empty()) return;
  const int64_t t = axis_->window().t_of(e->position().x(), style_.label_width, std::max(1, width() - style_.label_width - 4));
  const int i = stack_.sample_at(t);
  if (i >= 0 && stack_.instr[static_cast<std::size_t>(i)] >= 0) emit instruction_clicked(stack_.rank, stack_.instr[static_cast<std::size_t>(i)]);
}

void MemoryView::wheelEvent(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  if (steps == 0) return;
  const int64_t anchor = axis_->window().t_of(e->position().x(), style_.label_width, std::max(1, width() - style_.label_width - 4));
  axis_->zoom(std::pow(0.5, steps), anchor);
  e->accept();
}

}  // namespace stagecraft::gui
