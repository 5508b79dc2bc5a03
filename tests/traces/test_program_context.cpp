// A trace names the Program it ran (model, training, plan and the lowered Program's fingerprint);
// the Program rebuilt from its header must carry that fingerprint, or the trace is refused.
#include "traces/program_context.hpp"

#include <gtest/gtest.h>

#include "core/program/fingerprint.hpp"
#include "fixtures.hpp"
#include "support.hpp"

namespace stagecraft::traces {
namespace {

trace::Trace simulated(const test::Scenario& s) { return test::simulate(s, test::cpu_cluster(s.plan.world())).trace; }

TEST(ProgramContext, ASimulatedTraceNamesItsProgram) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  const trace::Trace t = simulated(s);
  EXPECT_EQ(t.program.fingerprint, program::fingerprint(s.program));
  EXPECT_EQ(t.program.instructions, static_cast<int64_t>(s.program.instruction_count()));
  EXPECT_EQ(t.training.at("dtype"), "fp32");
  const ProgramContext pc = program_of(test::as_trace(t, "sim.json"));
  EXPECT_EQ(pc.training_origin, "trace header");
  EXPECT_EQ(pc.training.dtype, spec::Dtype::kFp32);
  EXPECT_EQ(program::fingerprint(pc.program), t.program.fingerprint);
}

TEST(ProgramContext, ATraceOfAnotherProgramIsRefused) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  trace::Trace t = simulated(s);
  t.program.fingerprint = "0123456789abcdef";
  test::expect_spec_error([&] { program_of(test::as_trace(t, "edited.json")); }, "/stagecraft/program/fingerprint",
                          "the trace ran another Program");
  // Lowered with another training than it ran (another dtype moves other bytes)
  spec::Training bf16 = s.training;
  bf16.dtype = spec::Dtype::kBf16;
  bf16.file = "bf16.json";
  test::expect_spec_error([&] { program_of(test::as_trace(simulated(s), "sim.json"), bf16); },
                          "/stagecraft/program/fingerprint", "--training bf16.json training");
}

TEST(ProgramContext, ATraceThatDoesNotNameItsProgramIsRefused) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  trace::Trace t = simulated(s);
  t.program = {};
  test::expect_spec_error([&] { program_of(test::as_trace(t, "old.json")); }, "/stagecraft/program",
                          "does not name the Program");
  t = simulated(s);
  t.training = nlohmann::json::object();
  test::expect_spec_error([&] { program_of(test::as_trace(t, "old.json")); }, "/stagecraft/training", "missing");
}

}  // namespace
}  // namespace stagecraft::traces
