// The GUI's models without widgets: inputs and axis chips, the command it copies (run through
// `stagecraft search`), the plan table and its filter, the memory series.
#include <QAbstractItemModelTester>
#include <QProcess>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "core/spec/error.hpp"
#include "gui/model/inputs.hpp"
#include "gui/model/memory_series.hpp"
#include "gui/model/plan_table_model.hpp"
#include "gui_support.hpp"

namespace stagecraft::gui {
namespace {

TEST(Environment, TheFixedFontIsLoaded) {
  EXPECT_EQ(QFontInfo(QGuiApplication::font()).family(), QStringLiteral("DejaVu Sans"))
      << "screenshots and pixel probes measure this font (fonts-dejavu-core)";
}

TEST(Inputs, ChipsAreTheSpacesValuesAndMapToLimits) {
  const Loaded l = load(test::tiny_inputs());
  std::vector<AxisChoice> axes = axis_choices(*l.space);
  ASSERT_EQ(axes.front().axis, "tp");
  std::vector<std::string> tp;
  for (int64_t v : l.space->tp_values()) tp.push_back(std::to_string(v));
  EXPECT_EQ(axes.front().values, tp);
  const auto zero = std::find_if(axes.begin(), axes.end(), [](const AxisChoice& a) { return a.axis == "zero"; });
  ASSERT_NE(zero, axes.end());
  EXPECT_EQ(zero->values, (std::vector<std::string>{"0", "1", "2", "3"}));
  // all checked: free (no limit)
  EXPECT_TRUE(limits_of(axes).tp.empty());
  EXPECT_TRUE(limits_of(axes).zero.empty());
  // unchecking ZeRO 0 and 2 pins 1 and 3
  zero->checked = {false, true, false, true};
  EXPECT_EQ(limits_of(axes).zero, (std::vector<int>{1, 3}));
  // none checked: the option named, as the CLI names it
  zero->checked = {false, false, false, false};
  try {
    limits_of(axes);
    FAIL() << "no ZeRO stage accepted";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("--zero"), std::string::npos) << e.what();
  }
}

TEST(Inputs, ABadFileIsTheLoadersErrorNamingIt) {
  Inputs in = test::tiny_inputs();
  in.model = std::string(STAGECRAFT_TEST_DATA) + "/no-such-model.json";
  try {
    load(in);
    FAIL() << "missing model accepted";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-model.json"), std::string::npos) << e.what();
  }
}

// CLI parity: the command "Copy as command" gives, run through `stagecraft`, returns the plans the
// GUI's search found, in the same order with the same step times.
TEST(Inputs, TheCopiedCommandReproducesTheSearch) {
  Inputs in = test::tiny_inputs();
  in.limits.zero = {1, 3};
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  ASSERT_FALSE(r.top.empty());
  const std::string cmd = search_command(in);
  ASSERT_EQ(cmd.rfind("stagecraft search ", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("--zero 1,3"), std::string::npos) << cmd;
  QProcess p;
  p.start(QStringLiteral("/bin/sh"), {QStringLiteral("-c"), QStringLiteral(STAGECRAFT_EXE) + QString::fromStdString(cmd.substr(10)) +
                                                                 QStringLiteral(" --json --no-progress --no-error-bars")});
  ASSERT_TRUE(p.waitForFinished(60000));
  ASSERT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  const nlohmann::json j = nlohmann::json::parse(p.readAllStandardOutput().toStdString());
  ASSERT_EQ(j.at("plans").size(), r.top.size());
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    EXPECT_EQ(j["plans"][i]["key"].get<std::string>(), r.top[i].key) << i;
    EXPECT_DOUBLE_EQ(j["plans"][i]["metrics"]["step_time_s"].get<double>(), r.top[i].metrics.step_time_s) << i;
  }
}

planner::Evaluated fake(const std::string& key, double step, int pp, int zero, bool fits) {
  planner::Evaluated e;
  e.key = key;
  e.plan.pp = pp;
  e.plan.zero.stage = zero;
  e.metrics.step_time_s = step;
  e.metrics.tokens_per_s = 1000.0 / step;
  e.metrics.fits = fits;
  e.metrics.peak_memory_bytes = 1 << 20;
  e.metrics.capacity_bytes = 1 << 21;
  e.metrics.time.compute_s = step;
  return e;
}

TEST(PlanTable, SortsNumbersAsNumbersAndRanksLikeTheSearch) {
  PlanTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  PlanFilterProxy proxy;
  proxy.setSourceModel(&model);
  QAbstractItemModelTester proxy_tester(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
  const std::vector<planner::Evaluated> rows = {fake("c", 10.0, 1, 0, true), fake("a", 9.5, 2, 1, true),
                                                fake("b", 100.0, 1, 3, false), fake("d", 9.5, 2, 1, true)};
  model.append(std::span(rows).subspan(0, 2));
  model.append(std::span(rows).subspan(2));
  ASSERT_EQ(model.rowCount(), 4);
  proxy.sort(PlanTableModel::kStep, Qt::AscendingOrder);
  std::vector<std::string> order;
  for (int r = 0; r < proxy.rowCount(); ++r) order.push_back(proxy.data(proxy.index(r, 0), kKeyRole).toString().toStdString());
  // 9.5 < 10.0 < 100.0 as numbers ("10.0" < "9.5" as text); equal times by key
  EXPECT_EQ(order, (std::vector<std::string>{"a", "d", "c", "b"}));
  // ranks: tokens/s descending among plans that fit, then key; the plan that does not fit has none
  EXPECT_EQ(model.rank_of(model.row_of("a")), 1);
  EXPECT_EQ(model.rank_of(model.row_of("d")), 2);
  EXPECT_EQ(model.rank_of(model.row_of("c")), 3);
  EXPECT_EQ(model.rank_of(model.row_of("b")), 0);
  EXPECT_EQ(model.data(model.index(model.row_of("b"), PlanTableModel::kRank), Qt::DisplayRole).toString(), QStringLiteral("—"));
  proxy.set_fits_only(true);
  EXPECT_EQ(proxy.rowCount(), 3);
  model.clear();
  EXPECT_EQ(proxy.rowCount(), 0);
}

// The ep column names the expert grid: the size, etpN where each expert's width is split, "ag" for
// the all-gather dispatcher, "flex" for the flex one (DeepEP); it sorts by ep.
TEST(PlanTable, TheExpertColumnNamesExpertTensorParallelismAndTheDispatcher) {
  PlanTableModel model;
  std::vector<planner::Evaluated> rows = {fake("a", 1.0, 1, 1, true), fake("b", 1.0, 1, 1, true), fake("c", 1.0, 1, 1, true),
                                         fake("d", 1.0, 1, 1, true)};
  rows[0].plan.ep = 8;
  rows[1].plan.ep = 4, rows[1].plan.etp = 2;
  rows[2].plan.ep = 2, rows[2].plan.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  rows[3].plan.ep = 16, rows[3].plan.moe_dispatcher = spec::MoeDispatcher::kFlex;
  model.append(rows);
  auto cell = [&](const char* key) {
    return model.data(model.index(model.row_of(key), PlanTableModel::kEp), Qt::DisplayRole).toString().toStdString();
  };
  EXPECT_EQ(cell("a"), "8");
  EXPECT_EQ(cell("b"), "4 etp2");
  EXPECT_EQ(cell("c"), "2 ag");
  EXPECT_EQ(cell("d"), "16 flex");
  EXPECT_EQ(model.data(model.index(model.row_of("b"), PlanTableModel::kEp), kRawRole).toDouble(), 4.0);
}

TEST(PlanTable, RanksOfASearchAreItsTopOrder) {
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  PlanTableModel model;
  model.set_result(r);
  ASSERT_EQ(model.rowCount(), static_cast<int>(r.evaluated.size()));
  for (std::size_t i = 0; i < r.top.size(); ++i) EXPECT_EQ(model.rank_of(model.row_of(r.top[i].key)), static_cast<int>(i) + 1);
  for (const planner::Evaluated& e : r.pareto) EXPECT_TRUE(model.on_front(model.row_of(e.key)));
  // the split and memory roles are the metrics
  const int row = model.row_of(r.top[0].key);
  const QVariantList split = model.data(model.index(row, PlanTableModel::kSplit), kSplitRole).toList();
  ASSERT_EQ(split.size(), 3);
  EXPECT_DOUBLE_EQ(split[0].toDouble(), r.top[0].metrics.time.compute_s);
  EXPECT_DOUBLE_EQ(split[1].toDouble(), r.top[0].metrics.time.exposed_comm_s);
  EXPECT_DOUBLE_EQ(split[2].toDouble(), r.top[0].metrics.time.bubble_s);
}

// The --where filter means what it means to `stagecraft results`: the keys it keeps are those a
// predicate over the same columns keeps; a bad expression is refused with SQLite's message and
// the filter stays as it was.
TEST(PlanTable, TheWhereFilterKeepsExactlyThePlansThatSatisfyIt) {
  Inputs in = test::tiny_inputs();
  in.top_k = 40;
  const Loaded l = load(in);
  const planner::SearchResult r = planner::search(*l.space, test::options_of(in));
  PlanTableModel model;
  model.set_result(r);
  PlanFilterProxy proxy;
  proxy.setSourceModel(&model);
  ASSERT_EQ(proxy.set_where("pp >= 2 and zero_stage = 1"), QString());
  std::set<std::string> kept, expect;
  for (int i = 0; i < proxy.rowCount(); ++i) kept.insert(proxy.data(proxy.index(i, 0), kKeyRole).toString().toStdString());
  for (const planner::Evaluated& e : r.evaluated) {
    if (e.plan.pp >= 2 && e.plan.zero.stage == 1) expect.insert(e.key);
  }
  EXPECT_EQ(kept, expect);
  ASSERT_FALSE(expect.empty()) << "the tiny space has pipelined ZeRO-1 plans";
  ASSERT_LT(expect.size(), r.evaluated.size());
  const QString error = proxy.set_where("pp >>= 2");
  EXPECT_FALSE(error.isEmpty());
  EXPECT_EQ(static_cast<std::size_t>(proxy.rowCount()), expect.size()) << "a refused expression changes nothing";
  ASSERT_EQ(proxy.set_where(""), QString());
  EXPECT_EQ(static_cast<std::size_t>(proxy.rowCount()), r.evaluated.size());
}

trace::Trace synthetic_memory(int64_t spike_at, int64_t spike_bytes) {
  trace::Trace t;
  for (int64_t i = 0; i < 10000; ++i) {
    trace::MemorySample s;
    s.rank = 0;
    s.time_ns = i * 1000;
    s.instr = static_cast<int32_t>(i);
    s.bytes[trace::MemoryKind::kParams] = 1000;
    s.bytes[trace::MemoryKind::kActivations] = (i % 97) * 10 + (i == spike_at ? spike_bytes : 0);
    t.memory.push_back(s);
  }
  return t;
}

// One sample 1 us long among 10,000 is still the drawn maximum at every width.
TEST(MemorySeries, DecimationKeepsTheSpikeAtEveryWidth) {
  const int64_t spike = 1'000'000;
  const MemoryStack s = memory_of(synthetic_memory(6543, spike), 0, 0);
  ASSERT_EQ(s.peak, 6543u);
  const int64_t expect = 1000 + (6543 % 97) * 10 + spike;
  EXPECT_EQ(s.peak_bytes(), expect);
  for (int width : {50, 99, 333, 1000, 1600, 5000}) {
    const std::vector<int> cols = s.columns(0, 10000 * 1000, width);
    int64_t drawn = 0;
    for (int i : cols) {
      if (i >= 0) drawn = std::max(drawn, s.bytes[static_cast<std::size_t>(i)].total());
    }
    EXPECT_EQ(drawn, expect) << "width " << width;
  }
  // a column before the first sample holds nothing; one inside a sample holds that sample
  const std::vector<int> early = s.columns(-5000, 500, 2);
  EXPECT_EQ(early[0], -1);
  EXPECT_EQ(early[1], 0);
  EXPECT_EQ(s.sample_at(2500), 2);
}

TEST(MemorySeries, ThePeakRankPeaksAtTheSimulatorsPeakWithItsBreakdown) {
  const PlanViewPtr v = test::tiny_view("tiny-pp2-dp2");
  const sim::Metrics& m = v->sim.metrics;
  const MemoryStack s = v->memory(m.peak_rank);
  EXPECT_EQ(s.peak_bytes(), m.peak_memory_bytes);
  EXPECT_EQ(s.bytes[s.peak], m.memory) << "the breakdown at the peak is the simulator's";
  EXPECT_TRUE(std::is_sorted(s.time_ns.begin(), s.time_ns.end()));
}

}  // namespace
}  // namespace stagecraft::gui
