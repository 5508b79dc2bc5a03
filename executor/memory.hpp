// MemoryTracker: the bytes the executor holds on one rank, by kind (trace::MemoryKind, the
// vocabulary the simulator uses too), as a stream of samples — one at start() and one at every
// change after it, each naming the instruction whose handling made it — from which the peak and
// its breakdown are read. The runner reports every allocation and release it makes:
// parameters, gradients, optimizer state (and its host copies with offload), gathered ZeRO-3
// buckets and message and bucket buffers (buffers), activation caches. It is bookkeeping of those
// buffers' sizes, not an allocator hook: memory the C++ runtime or MPI hold is not in it, and
// `reserved` stays 0. Without a trace only the peak sample is kept (a long run would otherwise
// keep every step's samples).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/trace/trace.hpp"

namespace stagecraft::executor {

using trace::MemoryKind;

class MemoryTracker {
 public:
  // From now on every change is a sample of rank `rank` at clock() (the trace's clock); the
  // state so far is the first one. `keep_samples`: keep them all (for a trace).
  void start(int64_t rank, std::function<int64_t()> clock, bool keep_samples);
  // The Program instruction whose handling makes the changes from now on (-1: none).
  void attribute_to(int32_t instr) { handling_ = instr; }
  void set(MemoryKind kind, int64_t bytes);
  void add(MemoryKind kind, int64_t delta) { set(kind, bytes(kind) + delta); }
  int64_t bytes(MemoryKind kind) const { return now_[kind]; }
  int64_t current() const { return now_.total(); }

  // The sample with the most bytes (the first of equal ones) and its total.
  const trace::MemorySample& peak_sample() const { return peak_; }
  int64_t peak() const { return peak_.total(); }
  const std::vector<trace::MemorySample>& samples() const { return samples_; }

 private:
  void record();

  trace::MemoryBytes now_;
  trace::MemorySample peak_;
  int64_t rank_ = 0;
  int32_t handling_ = -1;
  bool started_ = false, keep_ = false, have_peak_ = false;
  std::function<int64_t()> clock_;
  std::vector<trace::MemorySample> samples_;
};

}  // namespace stagecraft::executor
