#include "core/trace/trace.hpp"

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::trace {
namespace {

TEST(Trace, RoundTripsThroughChromeJson) {
  Trace t;
  t.source = "simulated";
  t.plan = {{"pp", 2}};
  t.events.push_back({3, program::Lane::kPpSend, program::Op::kSendActivation, 17, 1500, 4500, 2, 1, 0, 4096, 0});
  t.events.push_back({0, program::Lane::kCompute, program::Op::kForward, 2, 0, 2'000'000, 0, 0, 0, 0, 1.5e9});
  MemorySample sample{0, 1000, 17, {}};
  sample.bytes[MemoryKind::kActivations] = 123456;
  sample.bytes[MemoryKind::kParams] = 1000;
  t.memory.push_back(sample);
  const nlohmann::json j = to_chrome_json(t);
  // Chrome units: microseconds; one thread per lane.
  bool found = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["args"]["instr"] == 17) {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1500 / 1000.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), (4500 - 1500) / 1000.0);
      EXPECT_EQ(e["tid"], static_cast<int>(program::Lane::kPpSend));
      EXPECT_EQ(e["args"]["kind"], "send");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  Trace back = from_chrome_json(j, "t.json");
  ASSERT_EQ(back.events.size(), 2u);
  EXPECT_EQ(back.events[0].instr, 17);
  EXPECT_EQ(back.events[0].end_ns, 4500);
  EXPECT_EQ(back.events[0].op, program::Op::kSendActivation);
  EXPECT_EQ(back.events[1].flops, 1.5e9);
  ASSERT_EQ(back.memory.size(), 1u);
  EXPECT_EQ(back.memory[0].total(), 123456 + 1000);
  EXPECT_EQ(back.memory[0].bytes, sample.bytes);   // every kind
  EXPECT_EQ(back.memory[0].instr, 17);
  EXPECT_EQ(back.source, "simulated");
}

TEST(Trace, MalformedEventsNameFileAndPointer) {
  nlohmann::json j = {{"stagecraft", {{"source", "measured"}}},
                      {"traceEvents", {{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 0}, {"dur", 1},
                                        {"args", {{"instr", 1}, {"kind", "forward"}, {"op", "Fwd"}}}}}}};
  test::expect_spec_error([&] { from_chrome_json(j, "m.json"); }, "/traceEvents/0/args/op", "Program instruction name");
  j["traceEvents"][0]["args"]["op"] = "Forward";
  j["traceEvents"][0]["tid"] = 99;
  test::expect_spec_error([&] { from_chrome_json(j, "m.json"); }, "/traceEvents/0/tid", "a lane index");
  j["stagecraft"]["source"] = "guessed";
  test::expect_spec_error([&] { from_chrome_json(j, "m.json"); }, "/stagecraft/source", "\"simulated\", \"measured\"");
}

}  // namespace
}  // namespace stagecraft::trace
