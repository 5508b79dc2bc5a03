#include "executor/cuda/event_clock.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

EventClock::~EventClock() {
  // at exit the runtime may be unloading before this static: the calls then fail, harmlessly
  for (auto& [instr, p] : pairs_) {
    if (p.start) cudaEventDestroy(p.start);
    if (p.end) cudaEventDestroy(p.end);
  }
  if (origin_) cudaEventDestroy(origin_);
}

EventClock::Pair& EventClock::pair(int32_t instr) {
  Pair& p = pairs_[instr];
  if (p.start == nullptr) {
    STAGECRAFT_CUDA_CHECK(cudaEventCreate(&p.start));
    STAGECRAFT_CUDA_CHECK(cudaEventCreate(&p.end));
  }
  return p;
}

void EventClock::step_begin(int64_t host_ns) {
  if (origin_ == nullptr) STAGECRAFT_CUDA_CHECK(cudaEventCreate(&origin_));
  for (auto& [instr, p] : pairs_) p.started = p.ended = false;
  // the device is idle between steps (the host waited for the last one): the origin completes at
  // once; its host time is host_ns plus what the host spent until it saw it complete
  const auto entry = std::chrono::steady_clock::now();
  STAGECRAFT_CUDA_CHECK(cudaEventRecord(origin_, nullptr));
  STAGECRAFT_CUDA_CHECK(cudaEventSynchronize(origin_));
  origin_ns_ = host_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - entry).count();
  on_ = true;
}

void EventClock::start(int32_t instr, cudaStream_t stream) {
  if (!on_ || instr < 0) return;
  Pair& p = pair(instr);
  if (p.started) return;
  STAGECRAFT_CUDA_CHECK(cudaEventRecord(p.start, stream));
  p.started = true;
}

void EventClock::end(int32_t instr, cudaStream_t stream) {
  if (!on_ || instr < 0) return;
  Pair& p = pair(instr);
  if (!p.started) return;
  STAGECRAFT_CUDA_CHECK(cudaEventRecord(p.end, stream));
  p.ended = true;
}

std::map<int32_t, std::pair<int64_t, int64_t>> EventClock::step_end() {
  std::map<int32_t, std::pair<int64_t, int64_t>> out;
  if (!on_) return out;
  on_ = false;
  for (auto& [instr, p] : pairs_) {
    if (!p.started || !p.ended) continue;
    STAGECRAFT_CUDA_CHECK(cudaEventSynchronize(p.end));
    float start_ms = 0, end_ms = 0;
    STAGECRAFT_CUDA_CHECK(cudaEventElapsedTime(&start_ms, origin_, p.start));
    STAGECRAFT_CUDA_CHECK(cudaEventElapsedTime(&end_ms, origin_, p.end));
    const auto ns = [this](float ms) { return origin_ns_ + static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6)); };
    out[instr] = {ns(start_ms), std::max(ns(start_ms), ns(end_ms))};
  }
  return out;
}

EventClock& event_clock() {
  static EventClock clock;
  return clock;
}

}  // namespace stagecraft::executor::cuda
