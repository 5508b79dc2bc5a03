#include "executor/memory.hpp"

#include <stdexcept>
#include <string>

namespace stagecraft::executor {

void MemoryTracker::start(int64_t rank, std::function<int64_t()> clock, bool keep_samples) {
  rank_ = rank;
  clock_ = std::move(clock);
  keep_ = keep_samples;
  started_ = true;
  handling_ = -1;
  samples_.clear();
  have_peak_ = false;
  record();
}

void MemoryTracker::set(MemoryKind kind, int64_t bytes) {
  if (bytes < 0) {
    throw std::logic_error(std::string("MemoryTracker: ") + trace::to_string(kind) + " would hold " + std::to_string(bytes) +
                           " bytes");
  }
  int64_t& slot = now_[kind];
  if (slot == bytes) return;
  slot = bytes;
  if (started_) record();
}

void MemoryTracker::record() {
  const trace::MemorySample m{rank_, clock_ ? clock_() : 0, handling_, now_};
  if (keep_) samples_.push_back(m);
  if (!have_peak_ || m.total() > peak_.total()) peak_ = m;
  have_peak_ = true;
}

}  // namespace stagecraft::executor
