// The Program a Stagecraft trace ran, rebuilt from its header, and the checks that the trace
// belongs to it. The header names the Program (SCHEMAS.md "Trace"): model, training, plan and the
// fingerprint of the lowered Program (core/program/fingerprint.hpp). The training comes from the
// caller when given (--training), else from the header; the Program lowered from them must have
// the header's fingerprint, else the trace is refused (it ran another Program: an edited header,
// another training, another Stagecraft's lowering).
// Every failure is a spec::SpecError naming the file and the JSON pointer: a header without a
// model, plan, training or fingerprint; specs that do not load or lower; a fingerprint that does
// not match; an event that does not belong to the Program (unknown instruction id on its rank,
// another op).
#pragma once

#include <optional>
#include <string>

#include "core/program/program.hpp"
#include "core/spec/training.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct ProgramContext {
  program::Program program;
  spec::Training training;
  std::string training_origin;       // "--training FILE" or "trace header"

  // The instruction `instr` on `rank`, or nullptr when it is not in that rank's list.
  const program::Instr* find(int64_t rank, int32_t instr) const;
  int64_t world() const { return program.placement.world(); }
};

ProgramContext program_of(const Trace& t, const std::optional<spec::Training>& training = std::nullopt);

// The same check on its own: every event's rank is in the plan's world, its instruction id is in
// that rank's list and has the event's op.
void check_events(const Trace& t, const ProgramContext& pc);

}  // namespace stagecraft::traces
