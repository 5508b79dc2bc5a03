// Event queue of the discrete-event engine: events ordered by (time_ns, sequence), the sequence
// being the order of insertion, so equal times pop in a fixed order and a run is reproducible.
// It knows nothing about GPUs or instructions: an event is two integers of payload.
#pragma once

#include <cstdint>
#include <queue>
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
  void push(int64_t time_ns, int32_t a, int32_t b) { heap_.push(Event{time_ns, next_++, a, b}); }
  bool empty() const { return heap_.empty(); }
  int64_t next_time_ns() const { return heap_.top().time_ns; }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    return e;
  }
  void reserve(std::size_t n) {
    std::vector<Event> storage;
    storage.reserve(n);
    heap_ = decltype(heap_)(Later{}, std::move(storage));
  }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const {
      return x.time_ns != y.time_ns ? x.time_ns > y.time_ns : x.sequence > y.sequence;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_ = 0;
};

}  // namespace stagecraft::sim
