#include "gui/render/paint_memory.hpp"

#include <QFontMetrics>

#include <algorithm>
#include <cmath>

#include "core/text/format.hpp"
#include "gui/render/palette.hpp"

namespace stagecraft::gui {

int MemoryPlot::y_of(double bytes) const {
  return top + height - static_cast<int>(std::lround(bytes / max_bytes * height));
}

MemoryPlot memory_plot(const QRect& area, const TimelineStyle& style, const MemoryStack& s, int64_t capacity_bytes) {
  MemoryPlot p;
  p.left = area.left() + style.label_width;
  p.width = std::max(1, area.width() - style.label_width - 4);
  p.top = area.top() + 18;
  p.height = std::max(1, area.height() - 18 - 4);
  p.max_bytes = 1.08 * static_cast<double>(std::max<int64_t>({1, capacity_bytes, s.peak_bytes()}));
  return p;
}

void paint_memory(QPainter& g, const QRect& area, const TimelineStyle& style, const MemoryStack& s, int64_t capacity_bytes,
                  const TimeWindow& w, const std::string& peak_note, std::optional<std::pair<int64_t, int64_t>> range) {
  g.save();
  g.setClipRect(area);
  g.fillRect(area, Qt::white);
  g.setRenderHint(QPainter::Antialiasing, false);
  const MemoryPlot p = memory_plot(area, style, s, capacity_bytes);
  g.fillRect(QRect(p.left, p.top, p.width, p.height), QColor(250, 250, 250));
  // y axis: GiB ticks
  const QFontMetrics fm(g.font());
  g.setPen(QColor(90, 90, 90));
  const double gib = 1024.0 * 1024 * 1024;
  const double top_gib = p.max_bytes / gib;
  double step = 1;
  for (double c : {1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 50.0, 100.0, 200.0, 500.0, 1000.0}) {
    step = c;
    if (top_gib / c <= 5) break;
  }
  for (double v = 0; v <= top_gib; v += step) {
    const int y = p.y_of(v * gib);
    g.drawLine(p.left - 4, y, p.left, y);
    g.drawText(QRect(area.left(), y - 8, style.label_width - 8, 16), Qt::AlignRight | Qt::AlignVCenter,
               QString::number(v, 'g', 4) + QStringLiteral(" GiB"));
  }
  // stacked columns
  const std::vector<int> cols = s.columns(w.t0, w.t1, p.width);
  for (int c = 0; c < p.width; ++c) {
    const int i = cols[static_cast<std::size_t>(c)];
    if (i < 0) continue;
    const trace::MemoryBytes& b = s.bytes[static_cast<std::size_t>(i)];
    double below = 0;
    for (trace::MemoryKind k : kStackOrder) {
      const double v = static_cast<double>(b[k]);
      if (v <= 0) continue;
      const int y0 = p.y_of(below), y1 = p.y_of(below + v);
      if (y0 > y1) g.fillRect(QRect(p.left + c, y1, 1, y0 - y1), memory_colour(k));
      below += v;
    }
  }
  if (range) {
    const int x0 = static_cast<int>(std::lround(std::max<double>(p.left, w.x_of(range->first, p.left, p.width))));
    const int x1 = static_cast<int>(std::lround(std::min<double>(p.left + p.width, w.x_of(range->second, p.left, p.width))));
    if (x1 > x0) g.fillRect(QRect(x0, p.top, x1 - x0, p.height), QColor(255, 200, 0, 60));
  }
  // capacity
  if (capacity_bytes > 0) {
    const int y = p.y_of(static_cast<double>(capacity_bytes));
    g.setPen(QPen(QColor(200, 0, 0), 1, Qt::DashLine));
    g.drawLine(p.left, y, p.left + p.width, y);
    g.setPen(QColor(200, 0, 0));
    g.drawText(p.left + 4, y - 3, QStringLiteral("capacity %1").arg(QString::fromStdString(text::short_bytes(static_cast<double>(capacity_bytes)))));
  }
  // peak marker and the legend line
  g.setPen(QColor(30, 30, 30));
  if (!s.empty()) {
    const int64_t tp = s.time_ns[s.peak];
    if (tp >= w.t0 && tp <= w.t1) {
      const int x = static_cast<int>(std::lround(w.x_of(tp, p.left, p.width)));
      const int y = p.y_of(static_cast<double>(s.peak_bytes()));
      g.drawLine(x, y - 6, x, y);
    }
  }
  int x = area.left() + 4;
  g.drawText(x, area.top() + 13, QString::fromStdString(peak_note));
  x = std::max(x + fm.horizontalAdvance(QString::fromStdString(peak_note)) + 16, p.left);
  for (auto it = kStackOrder.rbegin(); it != kStackOrder.rend(); ++it) {
    g.fillRect(QRect(x, area.top() + 4, 10, 10), memory_colour(*it));
    const QString name = QString::fromUtf8(trace::to_string(*it));
    g.drawText(x + 13, area.top() + 13, name);
    x += 13 + fm.horizontalAdvance(name) + 10;
  }
  g.restore();
}

}  // namespace stagecraft::gui
