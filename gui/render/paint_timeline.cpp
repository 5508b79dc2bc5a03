#include "gui/render/paint_timeline.hpp"

#include <QFontMetrics>

#include <algorithm>
#include <cmath>

#include "gui/render/palette.hpp"

namespace stagecraft::gui {

double TimeWindow::x_of(int64_t t, int left, int width) const {
  return left + static_cast<double>(t - t0) / static_cast<double>(std::max<int64_t>(1, t1 - t0)) * width;
}

int64_t TimeWindow::t_of(double x, int left, int width) const {
  return t0 + static_cast<int64_t>(std::llround((x - left) / std::max(1, width) * static_cast<double>(t1 - t0)));
}

TimelineLayout layout_timeline(const traces::TimelineModel& m, const TimelineStyle& style) {
  TimelineLayout l;
  int y = style.ruler_height;
  int64_t rank = -1;
  for (std::size_t i = 0; i < m.rows().size(); ++i) {
    const traces::TimelineRow& r = m.rows()[i];
    const bool compute = r.lane == program::Lane::kCompute;
    if (style.schedule && !compute) continue;
    TimelineLayout::Row row;
    row.model_row = static_cast<int>(i);
    row.first_of_rank = r.rank != rank;
    if (row.first_of_rank && rank >= 0) y += style.rank_gap;
    rank = r.rank;
    row.y = y;
    row.height = style.schedule ? style.schedule_height : compute ? style.compute_height : style.lane_height;
    y += row.height + 1;
    l.rows.push_back(row);
  }
  l.height = y + 2;
  return l;
}

int row_at(const TimelineLayout& layout, int y) {
  for (const TimelineLayout::Row& r : layout.rows) {
    if (y >= r.y && y < r.y + r.height) return r.model_row;
  }
  return -1;
}

namespace {

void paint_ruler(QPainter& g, const QRect& area, const TimelineStyle& style, const TimeWindow& w, int plot_left, int plot_width) {
  g.setPen(QColor(90, 90, 90));
  const int base = area.top() + style.ruler_height - 4;
  g.drawLine(plot_left, base, plot_left + plot_width, base);
  for (const TimeTick& t : time_ticks(w.t0, w.t1, std::max(2, plot_width / 110))) {
    const int x = static_cast<int>(std::lround(w.x_of(t.t, plot_left, plot_width)));
    g.drawLine(x, base - 4, x, base);
    g.drawText(x + 2, base - 5, t.label);
  }
}

}  // namespace

void paint_timeline(QPainter& g, const QRect& area, const traces::TimelineModel& m, const TimelineLayout& layout,
                    const TimelineStyle& style, const TimeWindow& w, const TimelineOverlay& overlay) {
  const std::optional<TimelineMark>& selected = overlay.selected;
  g.save();
  g.setClipRect(area);
  g.fillRect(area, Qt::white);
  const int plot_left = area.left() + style.label_width;
  const int plot_width = std::max(1, area.width() - style.label_width - 4);
  paint_ruler(g, area, style, w, plot_left, plot_width);
  const QFontMetrics fm(g.font());
  g.setRenderHint(QPainter::Antialiasing, false);
  for (const TimelineLayout::Row& lr : layout.rows) {
    const traces::TimelineRow& r = m.rows()[static_cast<std::size_t>(lr.model_row)];
    const int top = area.top() + lr.y;
    if (top > area.bottom()) break;
    if (top + lr.height < area.top()) continue;
    // label gutter and row background
    g.fillRect(QRect(plot_left, top, plot_width, lr.height), QColor(246, 246, 246));
    g.setPen(QColor(40, 40, 40));
    const QString lane = m.kernel_level() ? QStringLiteral("stream %1").arg(r.stream) : QString::fromUtf8(program::to_string(r.lane));
    const QString label = style.schedule ? QStringLiteral("rank %1").arg(r.rank)
                                         : (lr.first_of_rank ? QStringLiteral("rank %1 ").arg(r.rank) : QString()) + lane;
    g.drawText(QRect(area.left() + 4, top, style.label_width - 8, lr.height), Qt::AlignVCenter | Qt::AlignRight,
               fm.elidedText(label, Qt::ElideLeft, style.label_width - 8));
    const auto [first, last] = m.visible(static_cast<std::size_t>(lr.model_row), w.t0, w.t1);
    if (last - first > static_cast<std::size_t>(plot_width)) {
      // level of detail: per pixel column, the dominant op as tall as the column is busy
      const std::vector<traces::TimelineColumn> cols = m.columns(static_cast<std::size_t>(lr.model_row), w.t0, w.t1, plot_width);
      const double col_ns = static_cast<double>(w.t1 - w.t0) / plot_width;
      for (int c = 0; c < plot_width; ++c) {
        const traces::TimelineColumn& col = cols[static_cast<std::size_t>(c)];
        if (col.dominant < 0) continue;
        const double frac = std::min(1.0, static_cast<double>(col.busy_ns) / col_ns);
        const int h = std::max(1, static_cast<int>(std::lround(frac * lr.height)));
        g.fillRect(QRect(plot_left + c, top + lr.height - h, 1, h), kind_colour(col.dominant));
      }
      continue;
    }
    for (std::size_t i = first; i < last; ++i) {
      const double xs = w.x_of(r.start[i], plot_left, plot_width), xe = w.x_of(r.end[i], plot_left, plot_width);
      const int x0 = static_cast<int>(std::floor(std::max<double>(xs, plot_left)));
      const int x1 = std::max(x0 + 1, static_cast<int>(std::ceil(std::min<double>(xe, plot_left + plot_width))));
      const program::Op op = r.op[i];
      if (program::is_recv(op) && r.busy_from[i] > r.start[i]) {
        const int xb = std::clamp(static_cast<int>(std::lround(w.x_of(r.busy_from[i], plot_left, plot_width))), x0, x1);
        g.fillRect(QRect(x0, top + lr.height / 4, xb - x0, lr.height - lr.height / 2), waiting_colour(op));
        if (x1 > xb) g.fillRect(QRect(xb, top, x1 - xb, lr.height), op_colour(op));
      } else {
        QColor c = kind_colour(r.kind[i]);
        if (style.schedule && r.chunk[i] > 0) c = c.lighter(100 + 25 * r.chunk[i]);
        if (overlay.colour) {
          if (const std::optional<QColor> e = overlay.colour(static_cast<std::size_t>(lr.model_row), i)) c = *e;
        }
        g.fillRect(QRect(x0, top, x1 - x0, lr.height), c);
      }
      if (overlay.ghost) {
        if (const auto s = overlay.ghost(static_cast<std::size_t>(lr.model_row), i)) {
          const int g0 = static_cast<int>(std::floor(w.x_of(s->first, plot_left, plot_width)));
          const int g1 = std::max(g0 + 1, static_cast<int>(std::ceil(w.x_of(s->second, plot_left, plot_width))));
          g.setPen(QColor(30, 30, 30));
          g.setBrush(Qt::NoBrush);
          g.drawRect(QRect(g0, top, g1 - g0 - 1, std::max(2, lr.height / 3)));
        }
      }
      if (style.schedule && x1 - x0 >= 14 && r.mb[i] >= 0 && !op_letter(op).isEmpty()) {
        g.setPen(Qt::white);
        const QString cell = x1 - x0 >= 26 ? op_letter(op) + QString::number(r.mb[i]) : QString::number(r.mb[i]);
        g.drawText(QRect(x0, top, x1 - x0, lr.height), Qt::AlignCenter, cell);
      }
    }
  }
  if (overlay.range) {
    const int x0 = static_cast<int>(std::lround(std::max<double>(plot_left, w.x_of(overlay.range->first, plot_left, plot_width))));
    const int x1 = static_cast<int>(std::lround(std::min<double>(plot_left + plot_width, w.x_of(overlay.range->second, plot_left, plot_width))));
    if (x1 > x0) {
      g.fillRect(QRect(x0, area.top() + style.ruler_height, x1 - x0, layout.height - style.ruler_height), QColor(255, 200, 0, 60));
      g.setPen(QColor(200, 140, 0));
      g.drawLine(x0, area.top() + style.ruler_height, x0, area.top() + layout.height);
      g.drawLine(x1, area.top() + style.ruler_height, x1, area.top() + layout.height);
    }
  }
  const auto centre_y = [&](int model_row) {
    for (const TimelineLayout::Row& lr : layout.rows) {
      if (lr.model_row == model_row) return area.top() + lr.y + lr.height / 2;
    }
    return -1;
  };
  g.setRenderHint(QPainter::Antialiasing, true);
  for (const auto& [from, to] : overlay.arrows) {
    const int y0 = centre_y(from.row), y1 = centre_y(to.row);
    if (y0 < 0 || y1 < 0) continue;
    const traces::TimelineRow& rs = m.rows()[static_cast<std::size_t>(from.row)];
    const traces::TimelineRow& rr = m.rows()[static_cast<std::size_t>(to.row)];
    const QPointF a(w.x_of(rs.start[from.index], plot_left, plot_width), y0);
    const QPointF b(w.x_of(rr.end[to.index], plot_left, plot_width), y1);
    g.setPen(QPen(QColor(20, 20, 20), 1.5));
    g.drawLine(a, b);
    const QPointF d = b - a;
    const double len = std::max(1.0, std::hypot(d.x(), d.y()));
    const QPointF u(d.x() / len, d.y() / len), n(-u.y(), u.x());
    g.setBrush(QColor(20, 20, 20));
    const QPointF head[3] = {b, b - 8 * u + 4 * n, b - 8 * u - 4 * n};
    g.drawPolygon(head, 3);
  }
  g.setRenderHint(QPainter::Antialiasing, false);
  if (selected && selected->row >= 0) {
    for (const TimelineLayout::Row& lr : layout.rows) {
      if (lr.model_row != selected->row) continue;
      const traces::TimelineRow& r = m.rows()[static_cast<std::size_t>(lr.model_row)];
      if (selected->index >= r.size()) break;
      const int x0 = static_cast<int>(std::floor(w.x_of(r.start[selected->index], plot_left, plot_width)));
      const int x1 = std::max(x0 + 2, static_cast<int>(std::ceil(w.x_of(r.end[selected->index], plot_left, plot_width))));
      g.setPen(QPen(Qt::black, 2));
      g.setBrush(Qt::NoBrush);
      g.drawRect(QRect(x0 - 1, area.top() + lr.y - 1, x1 - x0 + 2, lr.height + 2));
    }
  }
  g.restore();
}

}  // namespace stagecraft::gui
