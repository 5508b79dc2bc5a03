#include "executor/memory.hpp"

#include <stdexcept>
#include <string>

namespace stagecraft::executor {

const char* to_string(MemKind k) {
  switch (k) {
    case MemKind::kParams: return "params";
    case MemKind::kGrads: return "grads";
    case MemKind::kOptimizer: return "optimizer";
    case MemKind::kGathered: return "gathered";
    case MemKind::kActivations: return "activations";
    case MemKind::kMessages: return "messages";
  }
  return "?";
}

void MemoryTracker::set(MemKind kind, int64_t bytes) {
  if (bytes < 0) {
    throw std::logic_error(std::string("MemoryTracker: ") + to_string(kind) + " would hold " + std::to_string(bytes) +
                           " bytes");
  }
  int64_t& slot = by_kind_[static_cast<std::size_t>(kind)];
  current_ += bytes - slot;
  slot = bytes;
  if (current_ > peak_) {
    peak_ = current_;
    at_peak_ = by_kind_;
  }
}

void MemoryTracker::sample(int64_t time_ns) {
  if (current_ == last_sampled_) return;
  samples_.push_back({rank_, time_ns, current_});
  last_sampled_ = current_;
}

}  // namespace stagecraft::executor
