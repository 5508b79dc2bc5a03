// InstrClock: a device's own timing of the instructions one rank ran. On a device the host's clock
// around a call times the launch, not the kernels, and a collective's end is seen only when the
// host next polls; a device clock records an event before and after each instruction's work on the
// stream it runs on (the compute stream, a channel's NCCL stream) and reads them once the step is
// over, so the trace's start and end are the device's, on the host's time axis.
//
// Semantics. step_begin(host_ns) marks the device clock's origin at the host's Tracer time
// host_ns; between it and step_end() the backend and the communicator mark each instruction's
// first start and last end (several calls of one instruction: the first start, the last end);
// step_end() waits for the marks and returns each instruction whose start and end were both
// marked, as [start, end] nanoseconds on the host's axis (origin + the device's elapsed time). An
// instruction it does not return keeps the host's times. Outside a step nothing is marked.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

namespace stagecraft::executor {

class InstrClock {
 public:
  virtual ~InstrClock() = default;
  virtual void step_begin(int64_t host_ns) = 0;
  virtual std::map<int32_t, std::pair<int64_t, int64_t>> step_end() = 0;
};

}  // namespace stagecraft::executor
