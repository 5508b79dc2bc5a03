// EventClock: the InstrClock (executor/instr_clock.hpp) of a CUDA device, one per process: a pair
// of CUDA events per instruction (kept and reused from step to step), recorded on the stream the
// instruction's work is enqueued on, read with cudaEventElapsedTime against an origin event
// recorded on an idle device at step_begin (its host time: host_ns plus the host's time until it
// saw the origin complete, so a device time is never earlier than the host time it followed). GPU
// timestamps are global to the device, so events of the compute stream and of the NCCL streams
// share the axis; cudaEventElapsedTime resolves about 0.5 µs.
//
// The CUDA backend marks its compute (CudaBackend::label_next, then every enqueue up to its sync);
// NcclCommunicator marks each operation on its stream (the label the interpreter gave it).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include <cuda_runtime_api.h>

#include "executor/instr_clock.hpp"

namespace stagecraft::executor::cuda {

class EventClock final : public InstrClock {
 public:
  EventClock() = default;
  ~EventClock() override;
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  void step_begin(int64_t host_ns) override;
  std::map<int32_t, std::pair<int64_t, int64_t>> step_end() override;

  // Whether a step is being timed.
  bool on() const { return on_; }
  // Instruction `instr`'s work starts next on `stream` (only its first start in a step counts).
  void start(int32_t instr, cudaStream_t stream);
  // Its work enqueued so far on `stream` ends here (the last call counts).
  void end(int32_t instr, cudaStream_t stream);

 private:
  struct Pair {
    cudaEvent_t start = nullptr, end = nullptr;
    bool started = false, ended = false;
  };
  Pair& pair(int32_t instr);

  bool on_ = false;
  cudaEvent_t origin_ = nullptr;
  int64_t origin_ns_ = 0;
  std::map<int32_t, Pair> pairs_;
};

// The process's clock (the device a rank drives).
EventClock& event_clock();

}  // namespace stagecraft::executor::cuda
