// render/timeline_png.hpp with Qt Gui (QImage + QPainter), offscreen (library stagecraft_render,
// built only with STAGECRAFT_WITH_GUI).
#include <QBuffer>
#include <QByteArray>
#include <QColor>
#include <QFontMetrics>
#include <QFont>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QString>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/io/file.hpp"
#include "render/colours.hpp"
#include "render/timeline_png.hpp"

namespace stagecraft::render {

namespace {

constexpr int kLabelWidth = 190;
constexpr int kRowHeight = 16;
constexpr int kTitleHeight = 24;
constexpr int kAxisHeight = 22;
constexpr int kMargin = 12;

QColor qcolour_of(const std::string& kind) {
  const Rgb c = colour_of(kind);
  return QColor(c.r, c.g, c.b);
}

QString time_label(double ns) {
  char buf[32];
  if (ns >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.3g s", ns * 1e-9);
  } else if (ns >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3g ms", ns * 1e-6);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g us", ns * 1e-3);
  }
  return QString::fromUtf8(buf);
}

int panel_height(const traces::TimelinePanel& p) { return kTitleHeight + static_cast<int>(p.rows.size()) * kRowHeight + kAxisHeight; }

void draw_panel(QPainter& g, const traces::TimelinePanel& p, int top, int width, double ns_per_px) {
  g.setPen(Qt::black);
  QFont bold = g.font();
  bold.setBold(true);
  g.setFont(bold);
  g.drawText(kMargin, top + 16, QString::fromStdString(p.title));
  bold.setBold(false);
  g.setFont(bold);
  // legend: the kinds this panel shows, right-aligned on the title line
  std::vector<std::string> kinds;
  for (const traces::TimelineBar& b : p.bars) {
    if (std::find(kinds.begin(), kinds.end(), b.kind) == kinds.end()) kinds.push_back(b.kind);
  }
  int x = width - kMargin;
  for (auto it = kinds.rbegin(); it != kinds.rend(); ++it) {
    const QString label = QString::fromStdString(*it);
    x -= g.fontMetrics().horizontalAdvance(label) + 22;
    g.fillRect(x, top + 6, 10, 10, qcolour_of(*it));
    g.drawText(x + 14, top + 16, label);
  }
  const int rows_top = top + kTitleHeight;
  for (std::size_t r = 0; r < p.rows.size(); ++r) {
    const int y = rows_top + static_cast<int>(r) * kRowHeight;
    if (r % 2 == 0) g.fillRect(kLabelWidth, y, width - kLabelWidth - kMargin, kRowHeight, QColor(245, 245, 245));
    g.setPen(Qt::black);
    g.drawText(kMargin, y + kRowHeight - 4, QString::fromStdString(p.rows[r]));
  }
  for (const traces::TimelineBar& b : p.bars) {
    const double x0 = kLabelWidth + static_cast<double>(b.start_ns) / ns_per_px;
    const double w = std::max(1.0, static_cast<double>(b.end_ns - b.start_ns) / ns_per_px);
    const int y = rows_top + b.row * kRowHeight + 2;
    g.fillRect(QRectF(x0, y, w, kRowHeight - 4), qcolour_of(b.kind));
  }
  const int axis_y = rows_top + static_cast<int>(p.rows.size()) * kRowHeight;
  g.setPen(Qt::darkGray);
  g.drawLine(kLabelWidth, axis_y, width - kMargin, axis_y);
  for (int i = 0; i <= 5; ++i) {
    const double x = kLabelWidth + i * (width - kLabelWidth - kMargin) / 5.0;
    g.drawLine(QPointF(x, axis_y), QPointF(x, axis_y + 4));
    g.drawText(QPointF(i == 5 ? x - 44 : x - 14, axis_y + 17), time_label((x - kLabelWidth) * ns_per_px));
  }
}

// Qt's informational warnings (no XDG_RUNTIME_DIR, font fallbacks) are noise on a command line;
// critical and fatal messages still go to stderr.
void quiet_handler(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (type == QtCriticalMsg || type == QtFatalMsg) std::fprintf(stderr, "qt: %s\n", message.toLocal8Bit().constData());
}

}  // namespace

bool png_available() { return true; }

void write_timeline_png(const std::vector<traces::TimelinePanel>& panels, const std::string& path, int width) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  static int argc = 1;
  static char name[] = "stagecraft";
  static char* argv[] = {name, nullptr};
  const QtMessageHandler previous = qInstallMessageHandler(quiet_handler);
  std::unique_ptr<QGuiApplication> app;
  if (!QGuiApplication::instance()) app = std::make_unique<QGuiApplication>(argc, argv);
  int64_t end_ns = 1;
  int height = kMargin;
  for (const traces::TimelinePanel& p : panels) {
    end_ns = std::max(end_ns, p.end_ns);
    height += panel_height(p) + kMargin;
  }
  const double ns_per_px = static_cast<double>(end_ns) / static_cast<double>(width - kLabelWidth - kMargin);
  QImage image(width, height, QImage::Format_ARGB32);
  image.fill(Qt::white);
  {
    QPainter g(&image);
    g.setRenderHint(QPainter::Antialiasing, false);
    int top = kMargin;
    for (const traces::TimelinePanel& p : panels) {
      draw_panel(g, p, top, width, ns_per_px);
      top += panel_height(p) + kMargin;
    }
  }
  // encoded in memory, then written through io::AtomicFile: a full disk or a kill never leaves a
  // truncated PNG over the previous good one (QImage::save wrote the target in place)
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  const bool encoded = image.save(&buffer, "PNG");
  qInstallMessageHandler(previous);
  if (!encoded) throw std::runtime_error("cannot encode the PNG for " + path);
  io::write_file(path, std::string_view(png.constData(), static_cast<std::size_t>(png.size())));
}

}  // namespace stagecraft::render
