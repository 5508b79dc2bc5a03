// Engine: the discrete-event loop. It knows time, an event queue and the network model, and
// nothing about GPUs or instructions (SimGrid's split: the engine asks each model for its next
// event and advances them to it). Each round takes the earliest of the queue's next event and the
// network's next flow event:
//   * a flow event first: the network advances to it and its completions go to on_flow, which
//     may only push events (so the completions can be read in place);
//   * else the network advances to the queue's event time (reporting completions at that very
//     time first, queued behind it), then the event goes to on_event.
// Equal times keep the queue's (time, sequence) order, so a run is reproducible. The loop ends
// when neither has anything left.
#pragma once

#include "sim/engine/event_queue.hpp"
#include "sim/network/flows.hpp"

namespace stagecraft::sim {

template <typename OnEvent, typename OnFlow>
void run_events(EventQueue& queue, FlowNetwork& network, OnEvent&& on_event, OnFlow&& on_flow) {
  while (true) {
    const int64_t tq = queue.empty() ? kNeverNs : queue.next_time_ns();
    const int64_t tn = network.next_event_time_ns();
    if (tq == kNeverNs && tn == kNeverNs) return;
    if (tn < tq) {
      for (const FlowCompletion& c : network.advance_to(tn)) on_flow(c);
      continue;
    }
    if (network.now_ns() < tq) {
      for (const FlowCompletion& c : network.advance_to(tq)) on_flow(c);
    }
    on_event(queue.pop());
  }
}

}  // namespace stagecraft::sim
