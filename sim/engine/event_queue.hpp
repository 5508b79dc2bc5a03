// Event queue of the discrete-event engine: events ordered by (time_ns, sequence), the sequence
// being the order of insertion, so equal times pop in a fixed order and a run is reproducible.
// It knows nothing about GPUs or instructions: an event is two integers of payload.
// A 4-ary min-heap: half the depth of a binary heap, and a node's four children share a cache
// line or two, so a pop compares more but waits on memory less.
#pragma once

#include <cstdint>
#include <vector>

namespace stagecraft::sim {

struct Event {
  int64_t time_ns = 0;
  uint64_t sequence = 0;
  int32_t a = 0;   // payload (the simulator: rank slot)
  int32_t b = 0;   // payload (the simulator: instruction index)
};

class EventQueue {
 public:
  void push(int64_t time_ns, int32_t a, int32_t b) {
    const Event e{time_ns, next_++, a, b};
    std::size_t i = heap_.size();
    heap_.push_back(e);
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (!earlier(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  int64_t next_time_ns() const { return heap_.front().time_ns; }
  Event pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n == 0) return top;
    std::size_t i = 0;
    for (;;) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t end = first + kArity < n ? first + kArity : n;
      for (std::size_t c = first + 1; c < end; ++c) {
        if (earlier(heap_[c], heap_[best])) best = c;
      }
      if (!earlier(heap_[best], last)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = last;
    return top;
  }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  static constexpr std::size_t kArity = 4;
  static bool earlier(const Event& x, const Event& y) {
    return x.time_ns != y.time_ns ? x.time_ns < y.time_ns : x.sequence < y.sequence;
  }
  std::vector<Event> heap_;
  uint64_t next_ = 0;
};

}  // namespace stagecraft::sim
