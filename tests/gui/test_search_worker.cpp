// The search off the GUI thread: same answer as the library, callbacks never on the GUI thread,
// the window kept responsive, Stop ending after the batch in flight with what was found.
#include <QSignalSpy>
#include <QThread>
#include <QTimer>

#include <gtest/gtest.h>

#include "gui/jobs/search_worker.hpp"
#include "gui_support.hpp"

namespace stagecraft::gui {
namespace {

TEST(SearchWorker, FindsWhatTheLibraryFindsOffTheGuiThread) {
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  const planner::SearchResult direct = planner::search(*l.space, test::options_of(in));
  SearchWorker w;
  QSignalSpy started(&w, &SearchWorker::started);
  QSignalSpy finished(&w, &SearchWorker::finished);
  std::vector<std::string> streamed;
  QObject::connect(&w, &SearchWorker::batch, [&](const PlanBatch& rows, const planner::Progress&) {
    EXPECT_EQ(QThread::currentThread(), QCoreApplication::instance()->thread()) << "signals arrive on the GUI thread";
    for (const planner::Evaluated& e : *rows) streamed.push_back(e.key);
  });
  w.start(l.space, in);
  EXPECT_TRUE(w.running());
  ASSERT_TRUE(test::wait_for([&] { return finished.count() == 1; }));
  EXPECT_EQ(started.count(), 1);
  EXPECT_FALSE(w.running());
  ASSERT_NE(w.callback_thread(), nullptr);
  EXPECT_NE(w.callback_thread(), QCoreApplication::instance()->thread()) << "the search ran on its own thread";
  const auto result = finished.at(0).at(0).value<SearchResultPtr>();
  ASSERT_EQ(result->top.size(), direct.top.size());
  for (std::size_t i = 0; i < direct.top.size(); ++i) {
    EXPECT_EQ(result->top[i].key, direct.top[i].key);
    EXPECT_EQ(result->top[i].metrics.step_time_s, direct.top[i].metrics.step_time_s);
  }
  ASSERT_EQ(streamed.size(), direct.evaluated.size()) << "every simulated plan streamed once";
  for (std::size_t i = 0; i < streamed.size(); ++i) EXPECT_EQ(streamed[i], direct.evaluated[i].key);
}

// The demo case on one search thread takes a good part of a second: Stop after the first batch
// ends the search within that batch; what was found is kept; the GUI thread's timer kept ticking.
TEST(SearchWorker, StopEndsAfterTheBatchInFlightAndKeepsWhatWasFound) {
  Inputs in = demo_inputs();
  in.threads = 1;
  const Loaded l = load(in);
  SearchWorker w;
  QSignalSpy finished(&w, &SearchWorker::finished);
  int batches = 0;
  int64_t last_evaluated = 0;
  bool monotone = true, within = true;
  std::size_t streamed = 0;
  QObject::connect(&w, &SearchWorker::batch, [&](const PlanBatch& rows, const planner::Progress& p) {
    ++batches;
    streamed += rows->size();
    monotone = monotone && p.evaluated >= last_evaluated;
    within = within && p.evaluated <= p.evaluated + p.remaining && p.remaining >= 0;
    last_evaluated = p.evaluated;
    if (batches == 1) w.stop();
  });
  int ticks = 0;
  QTimer timer;
  QObject::connect(&timer, &QTimer::timeout, [&] { ++ticks; });
  timer.start(10);
  w.start(l.space, in);
  ASSERT_TRUE(test::wait_for([&] { return finished.count() == 1; }, 60000));
  timer.stop();
  const auto r = finished.at(0).at(0).value<SearchResultPtr>();
  EXPECT_TRUE(r->interrupted);
  EXPECT_GT(r->counts.unexplored, 0);
  EXPECT_FALSE(r->top.empty()) << "the plans of the first batches are kept";
  // the batch in flight when Stop came may finish: at most two batches were simulated
  const int64_t batch = planner::SearchOptions{}.batch;
  EXPECT_LE(r->counts.evaluated, 2 * batch);
  EXPECT_EQ(streamed, r->evaluated.size());
  EXPECT_LE(batches, 2);
  EXPECT_TRUE(monotone);
  EXPECT_TRUE(within);
  EXPECT_GT(ticks, 0) << "the GUI thread kept running while the search worked";
}

TEST(SearchWorker, ASecondStartWhileRunningIsIgnored) {
  const Inputs in = test::tiny_inputs();
  const Loaded l = load(in);
  SearchWorker w;
  QSignalSpy started(&w, &SearchWorker::started);
  QSignalSpy finished(&w, &SearchWorker::finished);
  w.start(l.space, in);
  w.start(l.space, in);
  ASSERT_TRUE(test::wait_for([&] { return finished.count() >= 1; }));
  QTest::qWait(50);
  EXPECT_EQ(started.count(), 1);
  EXPECT_EQ(finished.count(), 1);
}

}  // namespace
}  // namespace stagecraft::gui
