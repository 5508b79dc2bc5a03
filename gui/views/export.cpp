#include "gui/views/export.hpp"

#include <QBuffer>
#include <QByteArray>
#include <QImage>
#include <QPainter>
#if defined(STAGECRAFT_GUI_SVG)
#include <QSvgGenerator>
#endif
#include <QTextStream>

#include <functional>
#include <stdexcept>

#include "core/io/file.hpp"
#include "core/text/format.hpp"
#include "core/trace/trace.hpp"
#include "gui/model/plan_table_model.hpp"
#include "gui/render/paint_memory.hpp"
#include "planner/deepspeed.hpp"
#include "planner/report.hpp"

namespace stagecraft::gui {

void export_plan(const std::string& path, const planner::Evaluated& e, const std::string& source) {
  spec::Plan p = e.plan;
  p.source = source;
  io::write_file(path, spec::to_json(p).dump(2) + "\n");
}

std::vector<std::string> deepspeed_warnings(const planner::Evaluated& e, const spec::Training& t) {
  return planner::to_deepspeed(e.plan, t).warnings;
}

void export_deepspeed(const std::string& path, const planner::Evaluated& e, const spec::Training& t) {
  io::write_file(path, planner::to_deepspeed(e.plan, t).config.dump(2) + "\n");
}

void export_trace(const std::string& path, const PlanView& v) { trace::write_trace(v.sim.trace, path); }

void export_search(const std::string& path, const planner::SearchResult& r) {
  io::write_file(path, planner::to_json(r, std::nullopt).dump(2) + "\n");
}

void export_csv(const std::string& path, const QAbstractItemModel& m) {
  static const char* const names[PlanTableModel::kColumnCount] = {
      "rank", "key", "step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "exposed_comm_s", "compute_s",
      "peak_memory_bytes", "tp", "cp", "ep", "pp", "dp", "micro_batch_x_micro_batches", "schedule", "zero_stage", "recompute",
      "sequence_parallel", "fits"};
  std::string out;
  for (int c = 0; c < m.columnCount(); ++c) out += std::string(c ? "," : "") + names[c];
  out += "\n";
  for (int r = 0; r < m.rowCount(); ++r) {
    for (int c = 0; c < m.columnCount(); ++c) {
      const QModelIndex i = m.index(r, c);
      QString cell;
      if (c == PlanTableModel::kRank) {
        const double rank = m.data(i, kRawRole).toDouble();
        cell = rank < 1e17 ? QString::number(static_cast<qlonglong>(rank)) : QString();
      } else if (c == PlanTableModel::kMicro || c == PlanTableModel::kSchedule || c == PlanTableModel::kRecompute ||
                 c == PlanTableModel::kSp || c == PlanTableModel::kFits || c == PlanTableModel::kPlan) {
        cell = m.data(i, Qt::DisplayRole).toString();
      } else {
        cell = QString::number(m.data(i, kRawRole).toDouble(), 'g', 12);
      }
      if (cell.contains(',') || cell.contains('"')) cell = '"' + cell.replace('"', QStringLiteral("\"\"")) + '"';
      if (c) out += ',';
      out += cell.toStdString();
    }
    out += "\n";
  }
  io::write_file(path, out);
}

namespace {

// Encoded in memory, written through io::AtomicFile: never a truncated PNG over a good one.
void write_png(const std::string& path, const QImage& image) {
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  if (!image.save(&buffer, "PNG")) throw std::runtime_error(path + ": cannot encode the PNG");
  io::write_file(path, std::string_view(png.constData(), static_cast<std::size_t>(png.size())));
}

// Paints into an SVG file of `size` with `paint`; refused where Qt Svg was not built in. Generated
// in memory and written through io::AtomicFile, as the PNGs are.
void write_svg(const std::string& path, QSize size, const QString& title, const std::function<void(QPainter&)>& paint) {
#if !defined(STAGECRAFT_GUI_SVG)
  (void)size;
  (void)title;
  (void)paint;
  throw std::runtime_error(path + ": this stagecraft-gui was built without Qt Svg (qt6-svg-dev); save a .png");
#else
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  {
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(size);
    svg.setViewBox(QRect(QPoint(0, 0), size));
    svg.setTitle(title);
    QPainter g;
    if (!g.begin(&svg)) throw std::runtime_error(path + ": cannot generate the SVG");
    paint(g);
    g.end();
  }
  io::write_file(path, std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
#endif
}

bool is_svg(const std::string& path) { return QString::fromStdString(path).endsWith(QStringLiteral(".svg"), Qt::CaseInsensitive); }

void paint_step(QPainter& g, const PlanView& v, const TimelineStyle& style, const TimeWindow& w, int64_t rank, QSize size,
                const TimelineLayout& layout, int memory_height) {
  paint_timeline(g, QRect(0, 0, size.width(), layout.height), v.timeline, layout, style, w);
  const MemoryStack s = v.memory(rank);
  std::string note = "rank " + std::to_string(rank) + " peak " + text::short_bytes(static_cast<double>(s.peak_bytes()));
  paint_memory(g, QRect(0, layout.height, size.width(), memory_height), style, s, v.cluster.gpu.memory_bytes, w, note);
}

}  // namespace

void export_step_image(const std::string& path, const PlanView& v, TimelineStyle style, const TimeWindow& window,
                       int64_t rank, QSize size) {
  const TimelineLayout layout = layout_timeline(v.timeline, style);
  const int memory_height = std::max(120, size.height() - layout.height);
  const QSize full(size.width(), layout.height + memory_height);
  if (is_svg(path)) {
    write_svg(path, full, QString::fromStdString("Stagecraft: " + v.key),
              [&](QPainter& g) { paint_step(g, v, style, window, rank, full, layout, memory_height); });
    return;
  }
  QImage image(full, QImage::Format_RGB32);
  image.fill(Qt::white);
  {
    QPainter g(&image);
    paint_step(g, v, style, window, rank, full, layout, memory_height);
  }
  write_png(path, image);
}

void export_widget_image(const std::string& path, QWidget& widget) {
  if (is_svg(path)) {
    write_svg(path, widget.size(), widget.windowTitle(), [&](QPainter& g) { widget.render(&g); });
    return;
  }
  write_png(path, widget.grab().toImage());
}

}  // namespace stagecraft::gui
