// The Program a Stagecraft trace ran, rebuilt from its header, and the check that the trace's
// events belong to it. The header carries the model and the plan (SCHEMAS.md "Trace"); the
// training comes, in this order, from the caller (--training), from a "training" object in the
// header, or is inferred: global_batch = micro_batch × micro_batches × dp, optimizer adam, and
// the dtype whose lowering gives the message sizes the events carry (bytes of sends and
// collectives: 4-byte elements for fp32, 2 for bf16/fp16). bf16 and fp16 move the same bytes;
// `dtypes` lists every dtype that matches so the caller can pick by the cluster's peak.
// A trace whose events do not belong to the lowered Program (unknown instruction id on its rank,
// another op) is a spec::SpecError naming the file and the event's JSON pointer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/dtype.hpp"
#include "core/spec/training.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct ProgramContext {
  program::Program program;
  spec::Training training;
  std::string training_origin;       // "--training FILE", "trace header", "inferred (...)"
  std::vector<spec::Dtype> dtypes;   // dtypes consistent with the events (training.dtype first)

  // The instruction `instr` on `rank`, or nullptr when it is not in that rank's list.
  const program::Instr* find(int64_t rank, int32_t instr) const;
  int64_t world() const { return program.placement.world(); }
};

// Throws spec::SpecError when the header lacks a model or plan, when they do not load, when
// they do not lower, or when an event does not belong to the Program.
ProgramContext program_of(const Trace& t, const std::optional<spec::Training>& training = std::nullopt);

// The same check on its own: every event's rank is in the plan's world, its instruction id is in
// that rank's list and has the event's op.
void check_events(const Trace& t, const ProgramContext& pc);

}  // namespace stagecraft::traces
