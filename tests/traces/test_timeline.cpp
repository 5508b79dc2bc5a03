// The timeline layout (rows per rank and lane, one bar per event of the first step) and, in
// builds with Qt, the PNG it draws.
#include "traces/timeline.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

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

TEST(Timeline, DrawsAPngWhenTheBuildHasQt) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  const Trace t = test::as_trace(test::simulate(s, test::cpu_cluster(4)).trace, "sim.json");
  const std::string path = (std::filesystem::temp_directory_path() / ("stagecraft_timeline_" + std::to_string(::getpid()) + ".png")).string();
  const std::vector<TimelinePanel> panels = {timeline_panel(t, "simulated"), timeline_panel(t, "measured")};
  if (!png_available()) {
    EXPECT_THROW(write_timeline_png(panels, path), std::runtime_error);
    return;
  }
  write_timeline_png(panels, path, 800);
  std::ifstream in(path, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(png, png + 8, header));
  // IHDR: width big-endian at bytes 16..19
  EXPECT_EQ((header[16] << 24) | (header[17] << 16) | (header[18] << 8) | header[19], 800);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stagecraft::traces
