// The timeline layout: rows per rank and lane, one bar per event of the first step (the PNG it
// draws: tests/render/test_timeline_png.cpp).
#include "traces/timeline.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "support.hpp"

namespace stagecraft::traces {
namespace {

TEST(Timeline, RowsPerRankAndLaneBarsPerEvent) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  const sim::SimResult r = test::simulate(s, test::cpu_cluster(4));
  const TimelinePanel p = timeline_panel(test::as_trace(r.trace, "sim.json"), "simulated");
  EXPECT_EQ(p.bars.size(), r.trace.events.size());
  EXPECT_EQ(p.rows.front(), "rank 0 compute");
  EXPECT_EQ(p.end_ns, std::llround(r.metrics.step_time_s * 1e9));
  for (const TimelineBar& b : p.bars) {
    EXPECT_GE(b.row, 0);
    EXPECT_LT(b.row, static_cast<int>(p.rows.size()));
    EXPECT_LE(b.start_ns, b.end_ns);
  }
  const TimelinePanel k = timeline_panel(read_trace_files({test::data_path("kineto/handwritten_rank0.json")}), "kineto");
  EXPECT_EQ(k.rows, (std::vector<std::string>{"rank 0 stream 7", "rank 0 stream 20"}));
  EXPECT_EQ(k.bars.size(), 5u);  // ProfilerStep#4 only
}

}  // namespace
}  // namespace stagecraft::traces
