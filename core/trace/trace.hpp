// The trace schema shared by simulated and measured traces (SCHEMAS.md "Trace"): one event per
// executed instruction with its Program id, memory samples per rank, and the model, training,
// plan and cluster it came from, with the fingerprint of the lowered Program. Written as Chrome trace event JSON (opens in Perfetto): pid = rank, tid = lane,
// "X" events with ts/dur in microseconds, "C" counters named "memory" with one series per memory
// kind (memory.hpp: args {"params": bytes, ...}) and the changing instruction's id as "instr"
// beside them (a top-level field trace viewers ignore).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/program/instruction.hpp"
#include "core/program/program.hpp"
#include "core/trace/memory.hpp"

namespace stagecraft::trace {

struct Event {
  int64_t rank = 0;
  program::Lane lane = program::Lane::kCompute;
  program::Op op = program::Op::kForward;
  int32_t instr = -1;       // Program instruction id
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t mb = -1;
  int32_t stage = -1;
  int32_t chunk = -1;
  int64_t bytes = 0;
  double flops = 0;
};

// Which Program a trace ran: the header's model, training and plan lower to a Program whose
// fingerprint (core/program/fingerprint.hpp) is this one.
struct ProgramIdentity {
  std::string fingerprint;          // empty: unknown
  int64_t instructions = 0;
};

struct Trace {
  std::string source;               // "simulated" | "measured"
  nlohmann::json plan = nlohmann::json::object();
  nlohmann::json model = nlohmann::json::object();
  nlohmann::json training = nlohmann::json::object();   // what ran: for a measured trace its dtype is the executed one
  nlohmann::json cluster = nlohmann::json::object();    // the profile (simulated) or {"name", "hosts"} (measured)
  ProgramIdentity program;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
};

// Sets the trace's model, training, plan and Program identity from the Program that ran.
void name_program(Trace& t, const program::Program& prog);

nlohmann::json to_chrome_json(const Trace& t);
// Parts of to_chrome_json(t) without building it: its "stagecraft" header, and how many metadata
// events (rank and lane names) come before the instruction events in its "traceEvents".
nlohmann::json header_json(const Trace& t);
int64_t metadata_event_count(const Trace& t);
// A Chrome-trace time in microseconds ("ts" a timestamp, "dur" a duration) in nanoseconds. A
// SpecError at `pointer` when it is a negative duration, a duration above 1e12 us (11.6 days) or a
// timestamp beyond +-4e15 us (the year 2096 as Unix time; int64 nanoseconds hold +-9.2e18).
int64_t trace_us_to_ns(double us, bool duration, const std::string& file, const std::string& pointer);
// Reads a Stagecraft trace back; throws spec::SpecError naming `file` and the JSON pointer of a
// malformed event.
Trace from_chrome_json(const nlohmann::json& j, const std::string& file);
void write_trace(const Trace& t, const std::string& path);
Trace read_trace(const std::string& path);

}  // namespace stagecraft::trace
