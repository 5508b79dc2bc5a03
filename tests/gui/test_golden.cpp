// Golden images (docs/gui.md "Testing"): a few views rendered headless and compared with a
// stored PNG under a tolerance — a pixel differs when a channel differs by more than 24, and at
// most 0.5% of the pixels may differ (antialiasing and font hinting move a few pixels between Qt
// patch releases; a changed layout or colour moves many). On failure the rendering and a diff
// (differing pixels in magenta over a faded copy) are written to build/Testing/gui-artifacts/;
// STAGECRAFT_UPDATE_GOLDEN=1 rewrites the goldens instead.
#include <QDir>
#include <QImage>
#include <QPainter>
#include <QTableView>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "gui/render/paint_memory.hpp"
#include "gui/render/paint_timeline.hpp"
#include "gui/views/pareto_view.hpp"
#include "gui/views/plan_table_view.hpp"
#include "gui_support.hpp"

namespace stagecraft::gui {
namespace {

constexpr int kChannelTolerance = 24;
constexpr double kPixelFraction = 0.005;

void expect_matches_golden(const QImage& actual_in, const std::string& name) {
  const QImage actual = actual_in.convertToFormat(QImage::Format_RGB32);
  const QString golden_path = QStringLiteral(STAGECRAFT_GOLDEN_DIR) + "/" + QString::fromStdString(name) + ".png";
  if (std::getenv("STAGECRAFT_UPDATE_GOLDEN")) {
    QDir().mkpath(QStringLiteral(STAGECRAFT_GOLDEN_DIR));
    ASSERT_TRUE(actual.save(golden_path)) << golden_path.toStdString();
    return;
  }
  const QImage golden = QImage(golden_path).convertToFormat(QImage::Format_RGB32);
  ASSERT_FALSE(golden.isNull()) << "no golden " << golden_path.toStdString() << " (STAGECRAFT_UPDATE_GOLDEN=1 writes it)";
  const QString dir = QStringLiteral(STAGECRAFT_GUI_ARTIFACTS);
  const auto save_actual = [&] {
    QDir().mkpath(dir);
    actual.save(dir + "/" + QString::fromStdString(name) + ".actual.png");
  };
  if (golden.size() != actual.size()) {
    save_actual();
    FAIL() << name << ": " << actual.width() << "x" << actual.height() << " rendered, golden " << golden.width() << "x"
           << golden.height() << " (the rendering is in " << dir.toStdString() << ")";
  }
  QImage diff(actual.size(), QImage::Format_RGB32);
  int64_t differing = 0;
  for (int y = 0; y < actual.height(); ++y) {
    const auto* a = reinterpret_cast<const QRgb*>(actual.constScanLine(y));
    const auto* b = reinterpret_cast<const QRgb*>(golden.constScanLine(y));
    auto* d = reinterpret_cast<QRgb*>(diff.scanLine(y));
    for (int x = 0; x < actual.width(); ++x) {
      const int delta = std::max({std::abs(qRed(a[x]) - qRed(b[x])), std::abs(qGreen(a[x]) - qGreen(b[x])), std::abs(qBlue(a[x]) - qBlue(b[x]))});
      if (delta > kChannelTolerance) {
        ++differing;
        d[x] = qRgb(255, 0, 255);
      } else {
        const int grey = (qGray(b[x]) + 3 * 255) / 4;
        d[x] = qRgb(grey, grey, grey);
      }
    }
  }
  const double fraction = static_cast<double>(differing) / (static_cast<double>(actual.width()) * actual.height());
  if (fraction > kPixelFraction) {
    save_actual();
    diff.save(dir + "/" + QString::fromStdString(name) + ".diff.png");
    ADD_FAILURE() << name << ": " << differing << " pixels (" << fraction * 100 << "%) differ from " << golden_path.toStdString()
                  << "; see " << dir.toStdString() << "/" << name << ".diff.png";
  }
}

TEST(Golden, TimelineAndScheduleAndMemoryOfAPipelinedPlan) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  for (const bool schedule : {false, true}) {
    TimelineStyle style;
    style.schedule = schedule;
    const TimelineLayout layout = layout_timeline(v->timeline, style);
    QImage img(1200, layout.height + 200, QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter g(&img);
    const TimeWindow w{0, v->timeline.end_ns()};
    paint_timeline(g, QRect(0, 0, 1200, layout.height), v->timeline, layout, style, w);
    paint_memory(g, QRect(0, layout.height, 1200, 200), style, v->memory(v->sim.metrics.peak_rank), v->cluster.gpu.memory_bytes, w,
                 "peak rank");
    g.end();
    expect_matches_golden(img, schedule ? "schedule-tiny-pp2-dp2" : "timeline-tiny-pp2-dp2");
  }
}

TEST(Golden, PlanTableAndParetoOfATinySearch) {
  Inputs in = test::tiny_inputs();
  in.top_k = 10;
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  PlanTableModel model;
  model.set_result(r);
  PlanTableView table(&model);
  table.resize(1200, 500);
  table.show();
  QApplication::processEvents();
  expect_matches_golden(table.grab().toImage(), "plans-tiny");
  ParetoView pareto;
  pareto.resize(1000, 600);
  pareto.set_plans(r.evaluated, r.pareto, r.capacity_bytes);
  pareto.select_key(r.top.front().key);
  pareto.show();
  QApplication::processEvents();
  expect_matches_golden(pareto.grab().toImage(), "pareto-tiny");
}

}  // namespace
}  // namespace stagecraft::gui
