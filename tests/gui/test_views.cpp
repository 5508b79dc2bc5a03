// The views through their widgets: the timeline's pixels, zoom, pan and hit tests, the schedule
// view, the memory chart's capacity line and peak, the Pareto scatter's series and capacity line,
// the main window end to end, and the exports.
#include <QImage>
#include <QPainter>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QWheelEvent>
#include <QXmlStreamReader>

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "core/spec/plan.hpp"
#include "core/trace/trace.hpp"
#include "gui/app/main_window.hpp"
#include "gui/render/paint_memory.hpp"
#include "gui/render/paint_timeline.hpp"
#include "gui/render/palette.hpp"
#include "gui/model/session.hpp"
#include "gui/model/stored.hpp"
#include "gui/views/export.hpp"
#include "gui/views/inputs_panel.hpp"
#include "gui/views/pareto_view.hpp"
#include "gui/views/plan_table_view.hpp"
#include "gui/views/space_map_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui_support.hpp"

namespace stagecraft::gui {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

QImage paint(const PlanView& v, const TimelineStyle& style, const TimeWindow& w, QSize size) {
  QImage img(size, QImage::Format_RGB32);
  img.fill(Qt::white);
  QPainter g(&img);
  paint_timeline(g, QRect(QPoint(0, 0), size), v.timeline, layout_timeline(v.timeline, style), style, w);
  return img;
}

// tiny-pp2-dp2's step in a timeline widget of `width` x 300.
struct TinyTimeline {
  explicit TinyTimeline(int width) : v(test::tiny_view("tiny-pp2-dp2")), view(&axis) {
    view.resize(width, 300);
    view.set_view(v);
  }
  PlanViewPtr v;
  TimeAxis axis;
  TimelineView view;
};

// The longest event of a row.
std::size_t longest(const traces::TimelineRow& r) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < r.size(); ++i) {
    if (r.end[i] - r.start[i] > r.end[best] - r.start[best]) best = i;
  }
  return best;
}

// Pixel probes: the centre of a bar has its op's colour; along rank 0's compute row the share of
// forward-coloured pixels is forward busy time over the step (±2%).
TEST(Timeline, BarsArePaintedInTheirOpsColourWhereTheyRun) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  const TimelineStyle style;
  const TimelineLayout layout = layout_timeline(v->timeline, style);
  const TimeWindow w{0, v->timeline.end_ns()};
  const QSize size(1200, layout.height);
  const QImage img = paint(*v, style, w, size);
  const int plot_width = size.width() - style.label_width - 4;
  const int row = v->timeline.row_of(0, program::Lane::kCompute);
  ASSERT_GE(row, 0);
  const traces::TimelineRow& r = v->timeline.rows()[static_cast<std::size_t>(row)];
  const TimelineLayout::Row& lr = layout.rows.front();
  ASSERT_EQ(lr.model_row, row);
  const std::size_t i = longest(r);
  const int x = static_cast<int>(w.x_of((r.start[i] + r.end[i]) / 2, style.label_width, plot_width));
  const int y = lr.y + lr.height / 2;
  EXPECT_EQ(QColor(img.pixel(x, y)), op_colour(r.op[i])) << "at the centre of #" << r.instr[i];

  int64_t forward_ns = 0;
  for (std::size_t k = 0; k < r.size(); ++k) {
    if (r.op[k] == program::Op::kForward) forward_ns += r.end[k] - r.start[k];
  }
  int forward_px = 0;
  for (int px = style.label_width; px < style.label_width + plot_width; ++px) forward_px += QColor(img.pixel(px, y)) == op_colour(program::Op::kForward);
  const double expect = static_cast<double>(forward_ns) / static_cast<double>(w.t1 - w.t0);
  EXPECT_NEAR(static_cast<double>(forward_px) / plot_width, expect, 0.02);
  ASSERT_GT(expect, 0.05);
}

TEST(Timeline, WheelZoomHalvesTheSpanAboutTheCursorAndKeysPanAndFit) {
  TinyTimeline t(1000);
  const PlanViewPtr& v = t.v;
  TimeAxis& axis = t.axis;
  TimelineView& view = t.view;
  const int64_t T = v->timeline.end_ns();
  ASSERT_EQ(axis.window().t0, 0);
  ASSERT_EQ(axis.window().t1, T);
  const QPointF at(600, 40);
  const int64_t before = axis.window().t_of(at.x(), view.style().label_width, 1000 - view.style().label_width - 4);
  QWheelEvent wheel(at, view.mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(&view, &wheel);
  const TimeWindow& w = axis.window();
  EXPECT_NEAR(static_cast<double>(w.t1 - w.t0), T / 2.0, 1.0);
  const int64_t after = w.t_of(at.x(), view.style().label_width, 1000 - view.style().label_width - 4);
  const double ns_per_px = static_cast<double>(w.t1 - w.t0) / (1000 - view.style().label_width - 4);
  EXPECT_NEAR(static_cast<double>(after - before), 0.0, ns_per_px) << "the time under the cursor stays under it";
  const int64_t t0 = w.t0, span = w.t1 - w.t0;
  QTest::keyClick(&view, Qt::Key_D);
  EXPECT_EQ(axis.window().t0, std::min<int64_t>(t0 + std::llround(span * 0.25), T - span)) << "D pans a quarter of the view later";
  QTest::keyClick(&view, Qt::Key_F);
  EXPECT_EQ(axis.window().t0, 0);
  EXPECT_EQ(axis.window().t1, T);
}

// Hovering over the middle of a bar names that instruction; the tooltip carries its id and op.
TEST(Timeline, HitTestAndTooltipNameTheInstructionUnderTheCursor) {
  TinyTimeline t(1000);
  const PlanViewPtr& v = t.v;
  TimelineView& view = t.view;
  const TimelineLayout::Row& lr = view.layout().rows.front();
  const traces::TimelineRow& r = v->timeline.rows()[static_cast<std::size_t>(lr.model_row)];
  const std::size_t i = longest(r);
  const QPoint pos(static_cast<int>(view.x_of((r.start[i] + r.end[i]) / 2)), lr.y + lr.height / 2);
  const std::optional<TimelineMark> hit = view.event_at(pos);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->row, lr.model_row);
  EXPECT_EQ(hit->index, i);
  const std::string tip = v->tooltip(static_cast<std::size_t>(hit->row), hit->index);
  EXPECT_NE(tip.find("#" + std::to_string(r.instr[i]) + " " + program::to_string(r.op[i])), std::string::npos) << tip;
  EXPECT_NE(tip.find("rank 0 compute"), std::string::npos) << tip;
  QSignalSpy selected(&view, &TimelineView::instruction_selected);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, pos);
  ASSERT_EQ(selected.count(), 1);
  EXPECT_EQ(selected.at(0).at(1).toULongLong(), i);
  EXPECT_FALSE(view.event_at(QPoint(10, pos.y())).has_value()) << "the label gutter holds no event";
}

// Shift + drag selects a time range on the shared axis; a plain click clears it. Each receive's
// peer is its send (the arrow drawn for a selected message): the send's start is where the
// receive stops waiting.
TEST(Timeline, ShiftDragSelectsARangeAndMessagesPairSendsWithReceives) {
  TinyTimeline t(1000);
  const PlanViewPtr& v = t.v;
  TimeAxis& axis = t.axis;
  TimelineView& view = t.view;
  const int y = view.layout().rows.front().y + 5;
  QSignalSpy ranged(&view, &TimelineView::range_selected);
  QTest::mousePress(&view, Qt::LeftButton, Qt::ShiftModifier, QPoint(300, y));
  QMouseEvent move(QEvent::MouseMove, QPointF(600, y), view.mapToGlobal(QPointF(600, y)), Qt::NoButton, Qt::LeftButton, Qt::ShiftModifier);
  QApplication::sendEvent(&view, &move);
  QTest::mouseRelease(&view, Qt::LeftButton, Qt::ShiftModifier, QPoint(600, y));
  ASSERT_EQ(ranged.count(), 1);
  ASSERT_TRUE(axis.range().has_value());
  const int width = 1000 - view.style().label_width - 4;
  EXPECT_EQ(axis.range()->first, axis.window().t_of(300, view.style().label_width, width));
  EXPECT_EQ(axis.range()->second, axis.window().t_of(600, view.style().label_width, width));
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, QPoint(700, y));
  EXPECT_FALSE(axis.range().has_value());

  int pairs = 0;
  for (std::size_t r = 0; r < v->timeline.rows().size(); ++r) {
    const traces::TimelineRow& row = v->timeline.rows()[r];
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (!program::is_recv(row.op[i])) continue;
      const auto peer = v->peer(r, i);
      ASSERT_TRUE(peer.has_value()) << "every receive of one replica has its send simulated";
      const traces::TimelineRow& sr = v->timeline.rows()[peer->first];
      EXPECT_TRUE(program::is_send(sr.op[peer->second]));
      EXPECT_NE(sr.rank, row.rank);
      EXPECT_EQ(row.busy_from[i], std::clamp(sr.start[peer->second], row.start[i], row.end[i]));
      EXPECT_EQ(v->peer(peer->first, peer->second), std::make_pair(r, i));
      ++pairs;
    }
  }
  // pp 2, one boundary: per micro-batch stage 1 receives an activation and stage 0 a gradient
  EXPECT_EQ(pairs, 2 * (v->plan.pp - 1) * v->plan.micro_batches);
}

// The critical path highlighted: the bars on it keep their op's colour, the others are faded.
TEST(Timeline, TheCriticalPathKeepsItsColoursAndFadesTheRest) {
  TinyTimeline t(1200);
  const PlanViewPtr& v = t.v;
  TimelineView& view = t.view;
  view.set_critical_path(true);
  ASSERT_TRUE(view.critical_path().has_value());
  const traces::CriticalPath& p = *view.critical_path();
  EXPECT_EQ(p.compute_ns + p.communication_ns + p.other_ns + p.wait_ns, v->timeline.end_ns());
  std::set<std::pair<std::size_t, std::size_t>> on;
  for (const traces::CriticalStep& st : p.steps) on.insert({st.row, st.index});
  const QImage img = view.grab().toImage();
  int checked_on = 0, checked_off = 0;
  for (const TimelineLayout::Row& lr : view.layout().rows) {
    const traces::TimelineRow& r = v->timeline.rows()[static_cast<std::size_t>(lr.model_row)];
    if (r.lane != program::Lane::kCompute) continue;
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (view.x_of(r.end[i]) - view.x_of(r.start[i]) < 6) continue;
      const QColor c(img.pixel(static_cast<int>(view.x_of((r.start[i] + r.end[i]) / 2)), lr.y + lr.height / 2));
      if (on.count({static_cast<std::size_t>(lr.model_row), i})) {
        EXPECT_EQ(c, op_colour(r.op[i])) << "#" << r.instr[i] << " on the path";
        ++checked_on;
      } else {
        EXPECT_NE(c, op_colour(r.op[i])) << "#" << r.instr[i] << " off the path";
        ++checked_off;
      }
    }
  }
  EXPECT_GT(checked_on, 0);
  EXPECT_GT(checked_off, 0) << "pp 2: some compute is off the path";
  view.set_critical_path(false);
  EXPECT_FALSE(view.critical_path().has_value());
}

// Schedule view: one compute row per simulated stage, and each stage runs every micro-batch's
// forward once, labelled with its number in a wide enough cell.
TEST(Timeline, TheScheduleViewHasAComputeRowPerStageWithEveryMicroBatch) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  TimelineStyle style;
  style.schedule = true;
  const TimelineLayout layout = layout_timeline(v->timeline, style);
  ASSERT_EQ(static_cast<int64_t>(layout.rows.size()), v->plan.pp) << "one replica: a rank per stage";
  for (const TimelineLayout::Row& lr : layout.rows) {
    const traces::TimelineRow& r = v->timeline.rows()[static_cast<std::size_t>(lr.model_row)];
    EXPECT_EQ(r.lane, program::Lane::kCompute);
    std::multiset<int32_t> forwards;
    for (std::size_t k = 0; k < r.size(); ++k) {
      if (r.op[k] == program::Op::kForward) forwards.insert(r.mb[k]);
    }
    std::multiset<int32_t> expect;
    for (int32_t mb = 0; mb < v->plan.micro_batches; ++mb) expect.insert(mb);
    EXPECT_EQ(forwards, expect) << r.label;
  }
}

// The capacity line is drawn at the GPU's memory, and the tallest drawn column is the peak.
TEST(Memory, CapacityLineAndPeakAreWhereTheNumbersSay) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  const MemoryStack s = v->memory(v->sim.metrics.peak_rank);
  const TimelineStyle style;
  const QSize size(1000, 300);
  const int64_t capacity = v->cluster.gpu.memory_bytes;
  QImage img(size, QImage::Format_RGB32);
  QPainter g(&img);
  paint_memory(g, QRect(QPoint(0, 0), size), style, s, capacity, TimeWindow{0, v->timeline.end_ns()}, "note");
  g.end();
  const MemoryPlot p = memory_plot(QRect(QPoint(0, 0), size), style, s, capacity);
  const int y = p.y_of(static_cast<double>(capacity));
  int red = 0;
  for (int x = p.left; x < p.left + p.width; ++x) red += QColor(img.pixel(x, y)) == QColor(200, 0, 0);
  EXPECT_GT(red, p.width / 3) << "a dashed line along the capacity";
  EXPECT_DOUBLE_EQ(p.max_bytes, 1.08 * static_cast<double>(std::max(capacity, s.peak_bytes())));
}

TEST(Pareto, PointsFrontAndCapacityAreTheSearchs) {
  Inputs in = test::tiny_inputs();
  in.top_k = 20;
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  ParetoView view;
  view.resize(1000, 600);
  view.set_plans(r.evaluated, r.pareto, r.capacity_bytes);
  view.show();
  QApplication::processEvents();
  int points = 0;
  for (const QScatterSeries* s : view.point_series()) points += static_cast<int>(s->count());
  EXPECT_EQ(points, static_cast<int>(r.evaluated.size()));
  // the step line: one corner per front plan, joined by one extra point between neighbours
  ASSERT_FALSE(r.pareto.empty());
  EXPECT_EQ(view.front_series()->count(), static_cast<int>(2 * r.pareto.size() - 1));
  std::vector<planner::Evaluated> f = r.pareto;
  std::sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.metrics.peak_memory_bytes < b.metrics.peak_memory_bytes; });
  for (std::size_t i = 0; i < f.size(); ++i) {
    const QPointF c = view.front_series()->at(static_cast<int>(2 * i));
    EXPECT_DOUBLE_EQ(c.x(), static_cast<double>(f[i].metrics.peak_memory_bytes) / kGiB);
    EXPECT_DOUBLE_EQ(c.y(), f[i].metrics.step_time_s);
  }
  EXPECT_DOUBLE_EQ(view.capacity_series()->at(0).x(), static_cast<double>(r.capacity_bytes) / kGiB);
  // selection ring and rectangle brushing
  view.select_key(r.top[0].key);
  ASSERT_EQ(view.selection_series()->count(), 1);
  EXPECT_DOUBLE_EQ(view.selection_series()->at(0).y(), r.top[0].metrics.step_time_s);
  const QPointF at = view.position_of(static_cast<double>(r.top[0].metrics.peak_memory_bytes) / kGiB, r.top[0].metrics.step_time_s);
  const std::unordered_set<std::string> inside = view.keys_in_rect(QRectF(at - QPointF(1, 1), at + QPointF(1, 1)));
  EXPECT_TRUE(inside.count(r.top[0].key));
}

// End to end: search, the best plan selected everywhere, its step drawn, the copied command.
TEST(MainWindow, ASearchSelectsTheBestPlanAndShowsItsStep) {
  MainWindow w;
  w.inputs()->set_inputs(test::tiny_inputs());
  ASSERT_TRUE(w.inputs()->loaded().has_value()) << w.inputs()->error().toStdString();
  w.resize(1400, 900);
  w.show();
  QSignalSpy ready(&w, &MainWindow::step_ready);
  w.start_search();
  ASSERT_TRUE(test::wait_for([&] { return ready.count() >= 1; }));
  ASSERT_TRUE(w.result());
  const planner::Evaluated& best = w.result()->top.front();
  EXPECT_EQ(w.selected_key(), best.key);
  EXPECT_EQ(w.table()->selected_key(), best.key);
  ASSERT_TRUE(w.timeline()->view());
  EXPECT_EQ(w.timeline()->view()->key, best.key);
  EXPECT_EQ(w.timeline()->view()->sim.metrics.step_time_s, best.metrics.step_time_s) << "the step drawn is the row's";
  EXPECT_EQ(w.memory()->stack().peak_bytes(), best.metrics.peak_memory_bytes);
  EXPECT_EQ(w.table_model()->rowCount(), static_cast<int>(w.result()->evaluated.size()));
  EXPECT_EQ(w.command(), search_command(w.inputs()->inputs()));
  // another plan from the table: every view follows
  const planner::Evaluated& second = w.result()->top.at(1);
  w.select_plan(QString::fromStdString(second.key));
  ASSERT_TRUE(test::wait_for([&] { return ready.count() >= 2; }));
  EXPECT_EQ(w.timeline()->view()->key, second.key);
  EXPECT_EQ(w.table()->selected_key(), second.key);
  ASSERT_EQ(w.pareto()->selection_series()->count(), 1);
  EXPECT_DOUBLE_EQ(w.pareto()->selection_series()->at(0).y(), second.metrics.step_time_s);
}

// A DeepSpeed config as the baseline: the ★ row pinned first whatever the sort, never ranked, with
// the numbers `simulate --deepspeed` gives; a star on the scatter; the command names it.
TEST(MainWindow, ADeepSpeedBaselineIsThePinnedStarRow) {
  MainWindow w;
  Inputs in = test::tiny_inputs();
  in.deepspeed = std::string(STAGECRAFT_TEST_DATA) + "/../planner/data/ds_minimal.json";
  w.inputs()->set_inputs(in);
  ASSERT_TRUE(w.inputs()->loaded().has_value()) << w.inputs()->error().toStdString();
  const std::optional<planner::Baseline>& b = w.inputs()->loaded()->baseline;
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->plan.zero.stage, 3) << "ds_minimal.json: stage 3";
  EXPECT_EQ(b->metrics.step_time_s, planner::simulate_plan(*w.inputs()->loaded()->space, b->plan).step_time_s);
  QSignalSpy done(&w, &MainWindow::search_done);
  w.start_search();
  ASSERT_TRUE(test::wait_for([&] { return done.count() >= 1; }));
  PlanTableModel* m = w.table_model();
  ASSERT_TRUE(m->is_baseline(0));
  EXPECT_EQ(m->rank_of(0), 0);
  EXPECT_EQ(m->data(m->index(0, PlanTableModel::kRank), Qt::DisplayRole).toString(), QStringLiteral("★"));
  EXPECT_EQ(m->rowCount(), static_cast<int>(w.result()->evaluated.size()) + 1);
  for (const Qt::SortOrder order : {Qt::AscendingOrder, Qt::DescendingOrder}) {
    w.table()->proxy()->sort(PlanTableModel::kStep, order);
    EXPECT_TRUE(m->is_baseline(w.table()->proxy()->mapToSource(w.table()->proxy()->index(0, 0)).row())) << "pinned first";
  }
  w.table()->proxy()->set_fits_only(true);
  w.table()->proxy()->set_text(QStringLiteral("no such key"));
  EXPECT_EQ(w.table()->proxy()->rowCount(), 1) << "filters keep the baseline";
  ASSERT_NE(w.pareto()->baseline_series(), nullptr);
  EXPECT_DOUBLE_EQ(w.pareto()->baseline_series()->at(0).y(), b->metrics.step_time_s);
  EXPECT_NE(w.command().find("--deepspeed "), std::string::npos) << w.command();
}

// With a results db, a stopped search resumes: its plans are reused and the answer is the one an
// uninterrupted search gives.
TEST(MainWindow, AStoppedSearchResumesFromTheResultsDb) {
  QTemporaryDir dir;
  Inputs in = demo_inputs();
  in.threads = 1;
  const Loaded l = load(in);
  const planner::SearchResult direct = planner::search(*l.space, test::options_of(in));
  in.db = dir.path().toStdString() + "/results.sqlite";
  MainWindow w;
  w.inputs()->set_inputs(in);
  ASSERT_TRUE(w.inputs()->loaded().has_value()) << w.inputs()->error().toStdString();
  QSignalSpy done(&w, &MainWindow::search_done);
  const QMetaObject::Connection stop = QObject::connect(w.worker(), &SearchWorker::batch, &w, [&w] { w.stop_search(); });
  w.start_search();
  ASSERT_TRUE(test::wait_for([&] { return done.count() == 1; }, 60000));
  QObject::disconnect(stop);
  ASSERT_TRUE(w.result()->interrupted);
  const int64_t first = w.result()->counts.evaluated;
  w.resume_search();
  ASSERT_TRUE(test::wait_for([&] { return done.count() == 2; }, 60000));
  const planner::SearchResult& r = *w.result();
  EXPECT_TRUE(r.resumed);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.counts.reused, first) << "every plan of the stopped search is reused";
  ASSERT_EQ(r.top.size(), direct.top.size());
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    EXPECT_EQ(r.top[i].key, direct.top[i].key) << i;
    EXPECT_EQ(r.top[i].metrics.step_time_s, direct.top[i].metrics.step_time_s) << i;
  }
}

// The space map: each cell is the fastest fitting plan of its (tp, pp), the top plan's cell holds
// it, and clicking a cell selects its plan.
TEST(SpaceMap, EachCellIsItsShapesFastestPlanAndAClickSelectsIt) {
  Inputs in = test::tiny_inputs();
  in.top_k = 20;
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  const std::vector<int64_t> tp = l.space->tp_values(), pp = {1, 2, 4};
  const SpaceMap m = space_map(tp, pp, r.evaluated);
  for (std::size_t i = 0; i < tp.size(); ++i) {
    for (std::size_t j = 0; j < pp.size(); ++j) {
      const planner::Evaluated* best = nullptr;
      int simulated = 0;
      for (const planner::Evaluated& e : r.evaluated) {
        if (e.plan.tp != tp[i] || e.plan.pp != pp[j]) continue;
        ++simulated;
        if (e.metrics.fits && (!best || planner::better(e, *best))) best = &e;
      }
      const SpaceCell& c = m.cells[i][j];
      EXPECT_EQ(c.simulated, simulated);
      EXPECT_EQ(c.best_key, best ? best->key : std::string());
    }
  }
  const auto ti = std::find(tp.begin(), tp.end(), r.top[0].plan.tp) - tp.begin();
  const auto pi = std::find(pp.begin(), pp.end(), r.top[0].plan.pp) - pp.begin();
  EXPECT_EQ(m.cells[static_cast<std::size_t>(ti)][static_cast<std::size_t>(pi)].best_key, r.top[0].key);
  SpaceMapView view;
  view.resize(600, 300);
  view.set_map(m);
  view.show();
  QSignalSpy clicked(&view, &SpaceMapView::plan_selected);
  const QRect cell = view.visualItemRect(view.item(static_cast<int>(ti), static_cast<int>(pi)));
  QTest::mouseClick(view.viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
  ASSERT_EQ(clicked.count(), 1);
  EXPECT_EQ(clicked.at(0).at(0).toString().toStdString(), r.top[0].key);
}

// A results store read back: the same plans and numbers, the same Pareto front by the search's
// rule, and in the window the stored best plan selected.
TEST(MainWindow, AResultsDbOpensWithTheSearchsPlansAndFront) {
  QTemporaryDir dir;
  const std::string db = dir.path().toStdString() + "/results.sqlite";
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  planner::SearchOptions o = test::options_of(in);
  o.db = db;
  const planner::SearchResult r = planner::search(*l.space, o);
  const std::vector<planner::StoredSearch> searches = stored_searches(db);
  ASSERT_EQ(searches.size(), 1u);
  const std::vector<planner::Evaluated> stored = stored_plans(db, searches[0].id);
  ASSERT_EQ(stored.size(), r.evaluated.size());
  std::map<std::string, double> direct;
  for (const planner::Evaluated& e : r.evaluated) direct[e.key] = e.metrics.step_time_s;
  for (const planner::Evaluated& e : stored) EXPECT_EQ(direct.at(e.key), e.metrics.step_time_s) << e.key;
  std::vector<std::string> front, stored_front;
  for (const planner::Evaluated& e : r.pareto) front.push_back(e.key);
  for (const planner::Evaluated& e : planner::pareto_front(stored)) stored_front.push_back(e.key);
  EXPECT_EQ(stored_front, front);
  MainWindow w;
  w.inputs()->set_inputs(in);
  QSignalSpy ready(&w, &MainWindow::step_ready);
  ASSERT_TRUE(w.open_stored(db, searches[0].id));
  EXPECT_EQ(w.table_model()->rowCount(), static_cast<int>(stored.size()));
  ASSERT_TRUE(test::wait_for([&] { return ready.count() >= 1; }));
  EXPECT_EQ(w.selected_key(), r.top.front().key);
  EXPECT_FALSE(w.open_stored(dir.path().toStdString() + "/none.sqlite", 1));
}

// A session saved and opened in a new window gives the same inputs (the same command), chips and
// selected plan; a bad session file says what is wrong and changes nothing.
TEST(MainWindow, ASessionComesBackAsItWasSaved) {
  QTemporaryDir dir;
  const std::string path = dir.path().toStdString() + "/a.stagecraft-session.json";
  std::string command, second;
  {
    MainWindow w;
    Inputs in = test::tiny_inputs();
    in.overrides = {spec::parse_override("cluster.inter_node.latency_ns=20000")};
    w.inputs()->set_inputs(in);
    w.inputs()->set_checked("zero", "0", false);
    QSignalSpy ready(&w, &MainWindow::step_ready);
    w.start_search();
    ASSERT_TRUE(test::wait_for([&] { return ready.count() >= 1; }));
    second = w.result()->top.at(1).key;
    w.select_plan(QString::fromStdString(second));
    ASSERT_TRUE(test::wait_for([&] { return ready.count() >= 2; }));
    command = w.command();
    w.save_session(path);
  }
  EXPECT_NE(command.find("--zero 1,2,3"), std::string::npos) << command;
  EXPECT_NE(command.find("--set cluster.inter_node.latency_ns=20000"), std::string::npos) << command;
  EXPECT_EQ(file_kind(path), FileKind::kSession);
  MainWindow w;
  QSignalSpy ready(&w, &MainWindow::step_ready);
  ASSERT_TRUE(w.open_session(path));
  ASSERT_TRUE(test::wait_for([&] { return w.selected_key() == second && ready.count() >= 1; }));
  EXPECT_EQ(w.command(), command);
  std::ofstream(dir.path().toStdString() + "/bad.json") << R"({"stagecraft_session": 1, "model": 3})";
  EXPECT_FALSE(w.open_session(dir.path().toStdString() + "/bad.json"));
  EXPECT_EQ(w.command(), command) << "nothing changed";
}

TEST(Files, ADroppedFileIsRoutedByItsContent) {
  using spec::ConfigKind;
  EXPECT_EQ(file_kind(spec::resolve_config(ConfigKind::kModel, "tiny")), FileKind::kModel);
  EXPECT_EQ(file_kind(spec::resolve_config(ConfigKind::kCluster, "cpu-local")), FileKind::kCluster);
  EXPECT_EQ(file_kind(spec::resolve_config(ConfigKind::kTraining, "tiny-cpu")), FileKind::kTraining);
  EXPECT_EQ(file_kind(spec::resolve_config(ConfigKind::kPlan, "tiny-pp2-dp2")), FileKind::kPlan);
  EXPECT_EQ(file_kind(std::string(STAGECRAFT_TEST_DATA) + "/../planner/data/ds_minimal.json"), FileKind::kDeepSpeed);
  EXPECT_EQ(file_kind(std::string(STAGECRAFT_TEST_DATA) + "/kineto/handwritten_rank0.json"), FileKind::kTrace);
  EXPECT_EQ(file_kind(std::string(STAGECRAFT_TEST_DATA) + "/hf/llama-2-7b-hf/config.json"), FileKind::kModel);
  EXPECT_EQ(file_kind(std::string(STAGECRAFT_TEST_DATA) + "/README.md"), FileKind::kUnknown);
  QTemporaryDir dir;
  const std::string db = dir.path().toStdString() + "/r.sqlite";
  { planner::Store store(db, false); }
  EXPECT_EQ(file_kind(db), FileKind::kResultsDb);
}

// A file that does not load: its loader's message, naming the file, is the panel's error, and
// there is nothing to search.
TEST(InputsPanel, AFileThatDoesNotLoadIsTheErrorAndNothingLoads) {
  InputsPanel panel;
  Inputs in = test::tiny_inputs();
  in.cluster = std::string(STAGECRAFT_TEST_DATA) + "/no-such-cluster.json";
  panel.set_inputs(in);
  EXPECT_FALSE(panel.loaded().has_value());
  EXPECT_TRUE(panel.error().contains(QStringLiteral("no-such-cluster.json"))) << panel.error().toStdString();
  panel.set_inputs(test::tiny_inputs());
  EXPECT_TRUE(panel.loaded().has_value()) << panel.error().toStdString();
}

TEST(MainWindow, AnUncheckedAxisDisablesSearchWithTheReason) {
  MainWindow w;
  w.inputs()->set_inputs(test::tiny_inputs());
  for (const char* z : {"0", "1", "2", "3"}) w.inputs()->set_checked("zero", z, false);
  EXPECT_FALSE(w.inputs()->loaded().has_value());
  EXPECT_TRUE(w.inputs()->error().contains(QStringLiteral("--zero"))) << w.inputs()->error().toStdString();
  w.inputs()->set_checked("zero", "1", true);
  EXPECT_TRUE(w.inputs()->loaded().has_value());
  EXPECT_EQ(w.inputs()->inputs().limits.zero, std::vector<int>{1});
}

TEST(Export, EachFileReadsBackAsWhatWasShown) {
  Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  const planner::Evaluated& best = r.top.front();
  const PlanViewPtr v = simulate_view(*l.space, best.plan, best.key);
  QTemporaryDir dir;
  const std::string d = dir.path().toStdString();
  export_plan(d + "/plan.json", best, "test");
  spec::Plan back = spec::load_plan(d + "/plan.json");
  EXPECT_EQ(back.source, "test");
  back.source = best.plan.source;
  back.file = best.plan.file;
  EXPECT_EQ(spec::to_json(back), spec::to_json(best.plan)) << "the plan the table shows, field by field";
  export_trace(d + "/trace.json", *v);
  EXPECT_EQ(trace::read_trace(d + "/trace.json").events.size(), v->sim.trace.events.size());
  PlanTableModel model;
  model.set_result(r);
  export_csv(d + "/plans.csv", model);
  std::ifstream csv(d + "/plans.csv");
  std::string line;
  int lines = 0;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("rank,key,step_time_s,", 0), 0u) << line;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, model.rowCount());
  const TimelineStyle style;
  const TimeWindow w{0, v->timeline.end_ns()};
  export_step_image(d + "/step.png", *v, style, w, 0, QSize(1200, 500));
  const QImage png(QString::fromStdString(d + "/step.png"));
  EXPECT_EQ(png.width(), 1200);
  EXPECT_GE(png.height(), 500);
#if defined(STAGECRAFT_GUI_SVG)
  export_step_image(d + "/step.svg", *v, style, w, 0, QSize(1200, 500));
  QFile svg(QString::fromStdString(d + "/step.svg"));
  ASSERT_TRUE(svg.open(QIODevice::ReadOnly));
  QXmlStreamReader xml(&svg);
  int rects = 0, paths = 0;
  while (!xml.atEnd()) {
    xml.readNext();
    if (xml.isStartElement()) {
      rects += xml.name() == QStringLiteral("rect");
      paths += xml.name() == QStringLiteral("path") || xml.name() == QStringLiteral("polygon");
    }
  }
  EXPECT_FALSE(xml.hasError()) << xml.errorString().toStdString();
  EXPECT_GT(rects + paths, static_cast<int>(v->timeline.rows().size())) << "at least a shape per row";
  // a chart, by the widget's own paint
  ParetoView pareto;
  pareto.resize(800, 500);
  pareto.set_plans(r.evaluated, r.pareto, r.capacity_bytes);
  export_widget_image(d + "/pareto.png", pareto);
  EXPECT_EQ(QImage(QString::fromStdString(d + "/pareto.png")).size(), QSize(800, 500));
  export_widget_image(d + "/pareto.svg", pareto);
  QFile chart(QString::fromStdString(d + "/pareto.svg"));
  ASSERT_TRUE(chart.open(QIODevice::ReadOnly));
  QXmlStreamReader chart_xml(&chart);
  while (!chart_xml.atEnd()) chart_xml.readNext();
  EXPECT_FALSE(chart_xml.hasError()) << chart_xml.errorString().toStdString();
#else
  EXPECT_THROW(export_step_image(d + "/step.svg", *v, style, w, 0, QSize(1200, 500)), std::runtime_error);
#endif
}

}  // namespace
}  // namespace stagecraft::gui
