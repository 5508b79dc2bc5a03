// The interactive timeline's data (docs/gui.md "Timeline"): one step of a Stagecraft trace as rows
// of intervals, built once and queried at every paint, so that a view of a million instructions
// pans and zooms without per-event objects.
//
//   rows      one per (rank, lane) that has events, in rank then lane order; each row holds its
//             events as parallel arrays sorted by start (struct of arrays), times in ns from the
//             step's first start.
//   receives  a receive's interval is split where its matched send began (busy_from, as
//             traces::activities counts communication): before it the receive only waits.
//   visible   the events of a row meeting [t0, t1): a binary search over starts, and over the
//             prefix maximum of the ends (so a row whose intervals overlap, e.g. receives posted
//             early, is still searched correctly).
//   columns   level of detail: [t0, t1) cut into n equal columns; each column's busy time (the
//             sum of its events' overlap with the column, so at most the column's width on a row
//             whose events do not overlap) and the op that holds most of it. The sums are exact:
//             summed over the columns they equal the events' busy time within [t0, t1).
// Pure C++ (no Qt): the GUI paints it, tests check it, and the PNG writer may use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "traces/analysis.hpp"
#include "traces/io/trace_io.hpp"
#include "traces/program_context.hpp"

namespace stagecraft::traces {

// What colours an event and what the level of detail sums by: a Program op (instruction-level
// traces), or kOpCount + a kernel class (PyTorch profiler traces: compute, communication, memory).
inline constexpr int kKindCount = program::kOpCount + 3;
std::string kind_name(int kind);

struct TimelineRow {
  int64_t rank = 0;
  program::Lane lane = program::Lane::kCompute;   // kernel level: kCompute
  int64_t stream = -1;                // kernel level: the GPU stream (or CPU thread)
  std::string label;                  // "rank 0 compute", "rank 0 stream 7"
  std::vector<int64_t> start, end;    // ns from the step's origin, sorted by start
  std::vector<int64_t> busy_from;     // receives: where the transfer starts (== start otherwise)
  std::vector<int64_t> max_end;       // prefix maximum of end
  std::vector<program::Op> op;         // instruction-level only (kernel-level rows hold kForward)
  std::vector<uint8_t> kind;           // see kKindCount
  std::vector<int32_t> instr, mb, chunk;   // -1 at kernel level
  std::vector<std::size_t> source;    // index into the trace's events
  int64_t busy_ns = 0;                // length of the union of the row's intervals

  std::size_t size() const { return start.size(); }
};

struct TimelineColumn {
  int64_t busy_ns = 0;
  int dominant = -1;                  // the kind with the most busy time in the column; -1: idle
};

class TimelineModel {
 public:
  TimelineModel() = default;
  // The `step`-th step of a trace (-1: the first); `pc` (optional) matches receives to their
  // sends. A PyTorch profiler trace (kernel level) has a row per rank and stream, its events the
  // kernels of that ProfilerStep, coloured by kernel class (no instruction ids).
  TimelineModel(const Trace& t, const ProgramContext* pc, int32_t step = -1);
  bool kernel_level() const { return kernel_level_; }

  const std::vector<TimelineRow>& rows() const { return rows_; }
  int64_t origin_ns() const { return origin_ns_; }   // the step's first start, in trace time
  int64_t end_ns() const { return end_ns_; }         // the step's length
  std::size_t event_count() const { return events_; }
  // Row index of (rank, lane), or -1.
  int row_of(int64_t rank, program::Lane lane) const;

  // [first, last): every event of the row meeting [t0, t1) (start < t1 and end > t0; a zero-length
  // event at t0 counts) lies in it, and on a row whose intervals do not overlap (a lane runs one
  // instruction at a time) nothing else does; where they overlap, a few earlier events ending
  // before t0 may be inside too.
  std::pair<std::size_t, std::size_t> visible(std::size_t row, int64_t t0, int64_t t1) const;
  // The event whose [start, end) holds t (the latest-starting one), if any.
  std::optional<std::size_t> event_at(std::size_t row, int64_t t) const;
  // Level of detail over [t0, t1) in n columns (n >= 1, t1 > t0).
  std::vector<TimelineColumn> columns(std::size_t row, int64_t t0, int64_t t1, int n) const;
  // Busy time of a row inside [t0, t1) (union of its intervals clipped to the range).
  int64_t busy_in(std::size_t row, int64_t t0, int64_t t1) const;
  // The partition of [t0, t1) on one rank (traces::partition, the rule of breakdown_by_rank):
  // over the whole step it is that rank's breakdown.
  Breakdown breakdown_in(int64_t rank, int64_t t0, int64_t t1) const;
  // Per kind, the summed time of the row's events inside [t0, t1) (ns; index: kind).
  std::vector<int64_t> kind_time_in(std::size_t row, int64_t t0, int64_t t1) const;

 private:
  std::vector<TimelineRow> rows_;
  int64_t origin_ns_ = 0, end_ns_ = 0;
  std::size_t events_ = 0;
  bool kernel_level_ = false;
};

}  // namespace stagecraft::traces
