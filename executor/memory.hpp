// MemoryTracker: the bytes the executor holds on one rank, by kind, with the high-water mark
// and a time series for the trace ("memory" counters). The runner reports every allocation and
// release it makes: parameters, gradients, optimizer state (and its host copies with offload),
// gathered ZeRO-3 buckets, activation caches, message and bucket buffers. It is bookkeeping of
// those buffers' sizes, not an allocator hook: memory the C++ runtime or MPI hold is not in it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/trace/trace.hpp"

namespace stagecraft::executor {

enum class MemKind : uint8_t { kParams, kGrads, kOptimizer, kGathered, kActivations, kMessages };
inline constexpr int kMemKinds = 6;
const char* to_string(MemKind k);

class MemoryTracker {
 public:
  void set(MemKind kind, int64_t bytes);
  void add(MemKind kind, int64_t delta) { set(kind, bytes(kind) + delta); }
  int64_t bytes(MemKind kind) const { return by_kind_[static_cast<std::size_t>(kind)]; }
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }
  // Bytes of each kind at the moment of the peak.
  const std::array<int64_t, kMemKinds>& at_peak() const { return at_peak_; }

  // Appends a sample when the total changed since the last one (time in the trace's clock).
  void sample(int64_t time_ns);
  const std::vector<trace::MemorySample>& samples() const { return samples_; }
  void set_rank(int64_t rank) { rank_ = rank; }

 private:
  std::array<int64_t, kMemKinds> by_kind_{};
  std::array<int64_t, kMemKinds> at_peak_{};
  int64_t current_ = 0;
  int64_t peak_ = 0;
  int64_t rank_ = 0;
  int64_t last_sampled_ = -1;
  std::vector<trace::MemorySample> samples_;
};

}  // namespace stagecraft::executor
