#include "executor/memory.hpp"

#include <stdexcept>
#include <string>

namespace stagecraft::executor {

void MemoryTracker::set(MemoryKind kind, int64_t bytes) {
  if (bytes < 0) {
    throw std::logic_error(std::string("MemoryTracker: ") + trace::to_string(kind) + " would hold " + std::to_string(bytes) +
                           " bytes");
  }
  int64_t& slot = now_[kind];
  if (slot == bytes) return;
  current_ += bytes - slot;
  slot = bytes;
  changed_ = true;
  last_instr_ = handling_;
  if (current_ > peak_) {
    peak_ = current_;
    at_peak_ = now_;
  }
}

void MemoryTracker::sample(int64_t time_ns) {
  if (!changed_) return;
  samples_.push_back({rank_, time_ns, last_instr_, now_});
  changed_ = false;
}

}  // namespace stagecraft::executor
