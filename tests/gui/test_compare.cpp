// The Compare workspace: a trace against itself has no error; a rank made slower is the culprit
// the grid points at; a trace of another plan is refused and changes nothing; calibrating from a
// measured trace and using the fitted profile brings the simulated step closer.
#include <QChartView>
#include <QTableWidget>
#include <QtCharts/QBarSet>
#include <QtCharts/QHorizontalStackedBarSeries>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui_support.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::gui {
namespace {

// A "measured" trace: the plan simulated on `cluster` for every rank (full), named measured.
traces::Trace measured_of(const PlanView& v, const spec::Cluster& cluster) {
  sim::SimOptions o;
  o.record_trace = true;
  o.full = true;
  trace::Trace t = sim::simulate(v.context.program, cluster, o).trace;
  t.source = "measured";
  return traces::from_core(t, "measured.json");
}

TEST(Compare, ATraceAgainstItselfHasNoError) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  CompareView view;
  view.set_simulated(v);
  ASSERT_TRUE(view.set_measured(measured_of(*v, v->cluster))) << view.error().toStdString();
  const traces::Comparison& c = view.data()->comparison;
  EXPECT_DOUBLE_EQ(c.step_error(), 0.0);
  for (const auto& [kind, k] : c.kinds) EXPECT_DOUBLE_EQ(k.error(), 0.0) << kind;
  EXPECT_EQ(view.kinds_table()->rowCount(), static_cast<int>(c.kinds.size()));
  ASSERT_TRUE(view.data()->measured);
  EXPECT_EQ(view.measured_timeline()->view()->timeline.end_ns(), v->timeline.end_ns());
}

// Rank 3's compute 30% slower: the grid's culprit cell is rank 3 on a compute kind, and the worst
// items are rank 3's.
TEST(Compare, ASlowRankIsTheCulpritTheGridMarks) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  traces::Trace m = measured_of(*v, v->cluster);
  for (trace::Event& e : m.data.events) {
    if (e.rank == 3 && e.lane == program::Lane::kCompute) e.end_ns = e.start_ns + (e.end_ns - e.start_ns) * 13 / 10;
  }
  CompareView view;
  view.set_simulated(v);
  ASSERT_TRUE(view.set_measured(m)) << view.error().toStdString();
  const ErrorGrid& g = view.data()->grid;
  ASSERT_GE(g.worst_rank, 0);
  EXPECT_EQ(g.ranks[static_cast<std::size_t>(g.worst_rank)], 3);
  const std::string& kind = g.kinds[static_cast<std::size_t>(g.worst_kind)];
  EXPECT_TRUE(kind == "forward" || kind == "backward" || kind == "optimizer") << kind;
  EXPECT_NEAR(g.error[static_cast<std::size_t>(g.worst_rank)][static_cast<std::size_t>(g.worst_kind)], 1 / 1.3 - 1, 0.01)
      << "simulated / measured − 1 = 1/1.3 − 1";
  ASSERT_FALSE(view.data()->comparison.worst.empty());
  EXPECT_EQ(view.data()->comparison.worst.front().rank, 3);
  EXPECT_TRUE(view.grid_table()->item(g.worst_rank, g.worst_kind)->text().contains(QStringLiteral("◀")));
  // the per-rank chart's bars are the comparison's partitions: rank 3 measured is its measured compute
  const auto* series = qobject_cast<QHorizontalStackedBarSeries*>(view.breakdown_chart()->chart()->series().at(0));
  ASSERT_NE(series, nullptr);
  const traces::RankComparison& rank3 = *std::find_if(view.data()->comparison.ranks.begin(), view.data()->comparison.ranks.end(),
                                                      [](const traces::RankComparison& r) { return r.rank == 3; });
  const int n = static_cast<int>(view.data()->comparison.ranks.size());
  ASSERT_EQ(series->barSets().at(0)->count(), 2 * n);
  // categories run from the last rank up; rank 3 is the first pair when it is the last rank
  ASSERT_EQ(view.data()->comparison.ranks.back().rank, 3);
  EXPECT_DOUBLE_EQ(series->barSets().at(0)->at(0), rank3.measured.compute_s);
  EXPECT_DOUBLE_EQ(series->barSets().at(0)->at(1), rank3.simulated.compute_s);
  EXPECT_DOUBLE_EQ(series->barSets().at(2)->at(0), rank3.measured.bubble_s);

  // overlay: rank 3's compute bars take the colour of their error, 1/1.3 − 1
  view.resize(1600, 900);
  view.set_overlay(true);
  TimelineView* mv = view.measured_timeline();
  mv->resize(1000, mv->layout().height);
  const QImage img = mv->grab().toImage();
  const traces::TimelineModel& tm = mv->view()->timeline;
  const int row = tm.row_of(3, program::Lane::kCompute);
  ASSERT_GE(row, 0);
  const traces::TimelineRow& r = tm.rows()[static_cast<std::size_t>(row)];
  std::size_t longest = 0;
  for (std::size_t i = 1; i < r.size(); ++i) {
    if (r.end[i] - r.start[i] > r.end[longest] - r.start[longest]) longest = i;
  }
  const auto lr = std::find_if(mv->layout().rows.begin(), mv->layout().rows.end(), [&](const auto& x) { return x.model_row == row; });
  ASSERT_NE(lr, mv->layout().rows.end());
  const QColor got(img.pixel(static_cast<int>(mv->x_of((r.start[longest] + r.end[longest]) / 2)), lr->y + lr->height * 3 / 4));
  const QColor want = error_colour(1 / 1.3 - 1);
  EXPECT_NEAR(got.red(), want.red(), 3);
  EXPECT_NEAR(got.green(), want.green(), 3);
  EXPECT_NEAR(got.blue(), want.blue(), 3);
  // a rank on time is white: rank 0's compute error is 0
  const int row0 = tm.row_of(0, program::Lane::kCompute);
  const traces::TimelineRow& r0 = tm.rows()[static_cast<std::size_t>(row0)];
  const auto lr0 = std::find_if(mv->layout().rows.begin(), mv->layout().rows.end(), [&](const auto& x) { return x.model_row == row0; });
  EXPECT_EQ(QColor(img.pixel(static_cast<int>(mv->x_of((r0.start[0] + r0.end[0]) / 2)), lr0->y + lr0->height * 3 / 4)), error_colour(0.0));
}

TEST(Compare, ATraceOfAnotherPlanIsRefusedAndChangesNothing) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  const PlanViewPtr other = test::tiny_view("tiny-zero3");
  CompareView view;
  view.set_simulated(v);
  ASSERT_TRUE(view.set_measured(measured_of(*v, v->cluster)));
  const double before = view.data()->comparison.step_measured_s;
  EXPECT_FALSE(view.set_measured(measured_of(*other, other->cluster)));
  EXPECT_FALSE(view.error().isEmpty());
  EXPECT_EQ(view.data()->comparison.step_measured_s, before);
}

// PyTorch profiler files: compared by rank, step and kernel class, the measured kernels drawn a
// row per rank and stream (the first ProfilerStep), no calibration (no Program in them).
TEST(Compare, PyTorchProfilerTracesAreDrawnPerStream) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  CompareView view;
  view.set_simulated(v);
  const std::string dir = std::string(STAGECRAFT_TEST_DATA) + "/kineto/";
  ASSERT_TRUE(view.load_measured({dir + "handwritten_rank0.json", dir + "handwritten_rank1.json"})) << view.error().toStdString();
  EXPECT_EQ(view.data()->comparison.level, traces::Level::kKernelClass);
  ASSERT_TRUE(view.data()->measured);
  const traces::TimelineModel& m = view.measured_timeline()->view()->timeline;
  EXPECT_TRUE(m.kernel_level());
  ASSERT_FALSE(m.rows().empty());
  EXPECT_EQ(m.rows().front().label, "rank 0 stream 7");
  const std::string tip = view.measured_timeline()->view()->tooltip(0, 0);
  EXPECT_NE(tip.find("rank 0 stream 7"), std::string::npos) << tip;
  EXPECT_FALSE(view.calibrate()) << "PyTorch traces are not calibration input";
}

// Measured on a cluster whose GEMMs run at 70% of the profile's efficiency: the profile's step is
// too fast; calibrated on the measured trace, the re-simulated step's error is smaller.
TEST(Compare, CalibratingAndUsingTheFitBringsTheStepCloser) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  spec::Cluster truth = v->cluster;
  for (auto& [flops, eff] : truth.gpu.matmul_efficiency) eff *= 0.7;
  CompareView view;
  view.set_simulated(v);
  ASSERT_TRUE(view.set_measured(measured_of(*v, truth)));
  const double before = view.data()->comparison.step_error();
  ASSERT_LT(before, -0.05) << "the profile is faster than the truth";
  ASSERT_TRUE(view.calibrate()) << view.error().toStdString();
  ASSERT_TRUE(view.calibration()->fitted_any());
  ASSERT_TRUE(view.use_calibrated()) << view.error().toStdString();
  const double after = view.data()->comparison.step_error();
  EXPECT_LT(std::fabs(after), std::fabs(before));
  EXPECT_DOUBLE_EQ(view.error_before(), before);
}

}  // namespace
}  // namespace stagecraft::gui
