// The Stagecraft schema through traces::Trace: positions of events in the file, steps of a
// multi-step measured trace, extra header keys, format detection.
#include "traces/io/trace_io.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::traces {
namespace {

using test::temp_path;

using program::Lane;
using program::Op;

trace::Trace two_steps() {
  trace::Trace t;
  t.source = "measured";
  // instr 5 and 6 on rank 1, twice (two steps); written out of time order on purpose
  t.events.push_back({1, Lane::kCompute, Op::kForward, 5, 3000, 4000, 0, 0, 0, 0, 1e6});
  t.events.push_back({1, Lane::kCompute, Op::kForward, 5, 0, 1000, 0, 0, 0, 0, 1e6});
  t.events.push_back({1, Lane::kPpSend, Op::kSendActivation, 6, 1000, 1500, 0, 0, 0, 64, 0});
  t.events.push_back({1, Lane::kPpSend, Op::kSendActivation, 6, 4000, 4500, 0, 0, 0, 64, 0});
  return t;
}

TEST(TraceIo, StepsAreOccurrencesOfAnInstructionInTimeOrder) {
  const std::vector<int32_t> steps = occurrence_steps(two_steps().events);
  EXPECT_EQ(steps, (std::vector<int32_t>{1, 0, 0, 1}));
}

TEST(TraceIo, StagecraftFileKeepsPositionsStepsAndHeader) {
  const std::string path = temp_path("io.json");
  Trace t = from_core(two_steps(), "x", {{"probe", {{"world", 2}}}});
  write_stagecraft(t, path);
  const Trace back = read_trace_files({path});
  EXPECT_EQ(back.format, Format::kStagecraft);
  EXPECT_TRUE(back.is_probe());
  EXPECT_EQ(back.meta["probe"]["world"], 2);
  ASSERT_EQ(back.data.events.size(), 4u);
  EXPECT_EQ(back.event_step, (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(back.step_count(), 2);
  // The pointer names the event's index in traceEvents (metadata events come first).
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  for (std::size_t i = 0; i < back.data.events.size(); ++i) {
    const nlohmann::json& e = j.at(nlohmann::json::json_pointer(back.event_pointer(i)));
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["args"]["instr"], back.data.events[i].instr);
    EXPECT_EQ(back.event_file(i), path);
  }
  std::remove(path.c_str());
}

// from_core builds in memory what writing the trace and reading it back gives: the same events, the
// same positions in the file, the same steps and header.
TEST(TraceIo, FromCoreIsTheFileReadBack) {
  trace::Trace core = two_steps();
  core.memory.push_back({0, 1500, 2, {{1, 2, 3, 4, 5, 6}}});
  core.memory.push_back({3, 2500, -1, {{6, 5, 4, 3, 2, 1}}});  // a rank with memory samples alone
  const std::string path = temp_path("from_core.json");
  const Trace direct = from_core(core, path, {{"probe", {{"world", 4}}}});
  write_stagecraft(direct, path);
  const Trace back = read_trace_files({path});
  EXPECT_EQ(trace::to_chrome_json(direct.data).dump(), trace::to_chrome_json(back.data).dump());
  EXPECT_EQ(direct.meta, back.meta);
  EXPECT_EQ(direct.event_step, back.event_step);
  ASSERT_EQ(direct.event_origin.size(), back.event_origin.size());
  for (std::size_t i = 0; i < direct.event_origin.size(); ++i) EXPECT_EQ(direct.event_pointer(i), back.event_pointer(i));
  std::remove(path.c_str());
}

TEST(TraceIo, DetectsFormats) {
  EXPECT_EQ(detect_format(nlohmann::json::array(), "a"), Format::kAutograd);
  EXPECT_EQ(detect_format({{"traceEvents", nlohmann::json::array()}}, "k"), Format::kKineto);
  EXPECT_EQ(detect_format({{"traceEvents", nlohmann::json::array()}, {"stagecraft", {{"source", "measured"}}}}, "s"),
            Format::kStagecraft);
  test::expect_spec_error([] { detect_format({{"traceEvents", 3}}, "k"); }, "/traceEvents", "an array");
}

TEST(TraceIo, OneStagecraftFileHoldsEveryRank) {
  const std::string path = temp_path("one.json");
  write_stagecraft(from_core(two_steps(), "x"), path);
  test::expect_spec_error([&] { read_trace_files({path, path}); }, "", "expected one Stagecraft trace");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stagecraft::traces
