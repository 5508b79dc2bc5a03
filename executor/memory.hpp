// MemoryTracker: the bytes the executor holds on one rank, by kind (trace::MemoryKind, the
// vocabulary the simulator uses too), with the high-water mark and a time series for the trace
// ("memory" counters). The runner reports every allocation and release it makes: parameters,
// gradients, optimizer state (and its host copies with offload), gathered ZeRO-3 buckets and
// message and bucket buffers (buffers), activation caches. It is bookkeeping of those buffers'
// sizes, not an allocator hook: memory the C++ runtime or MPI hold is not in it, and `reserved`
// stays 0. A sample is taken after each round of the interpreter in which something changed,
// and names the last instruction whose handling changed it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/trace.hpp"

namespace stagecraft::executor {

using trace::MemoryKind;

class MemoryTracker {
 public:
  // The Program instruction whose handling makes the changes from now on (-1: none).
  void attribute_to(int32_t instr) { handling_ = instr; }
  void set(MemoryKind kind, int64_t bytes);
  void add(MemoryKind kind, int64_t delta) { set(kind, bytes(kind) + delta); }
  int64_t bytes(MemoryKind kind) const { return now_[kind]; }
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }
  // Bytes of each kind at the moment of the peak.
  const trace::MemoryBytes& at_peak() const { return at_peak_; }

  // Appends a sample when anything changed since the last one (time in the trace's clock).
  void sample(int64_t time_ns);
  const std::vector<trace::MemorySample>& samples() const { return samples_; }
  void set_rank(int64_t rank) { rank_ = rank; }

 private:
  trace::MemoryBytes now_;
  trace::MemoryBytes at_peak_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
  int64_t rank_ = 0;
  int32_t handling_ = -1;
  int32_t last_instr_ = -1;
  bool changed_ = true;
  std::vector<trace::MemorySample> samples_;
};

}  // namespace stagecraft::executor
