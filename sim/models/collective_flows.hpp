// Collective flows: how the simulator puts a collective on the FlowNetwork, so that it contends
// with pipeline traffic and with other collectives (the one mapping from a collective to flows).
// The collective's contention-free time T comes from the collective model (collectives.hpp) over
// the group's real placement. Each simulated member of the group then puts one flow on the route
// to its successor on the ring stage that bounds the collective:
//   * all members on one node: the flat ring, successor = the next member, n − 1 steps;
//   * members on N > 1 nodes: the inter-node ring of the member's rail (the hierarchical
//     algorithm's stage that crosses the NICs), successor = the member n/N places on in the
//     group, N − 1 steps;
// carrying the bytes it sends on that stage, steps · ⌈S/n⌉ (twice for an all-reduce: its
// reduce-scatter and all-gather halves; S the buffer, n the group size), with a rate cap of
// bytes / T, so that alone on its links the flow ends after T (to the rounding of one transfer)
// and sharing a link it is slowed by max-min fairness. The intra-node stages of a hierarchical
// collective run on NVLink and are inside T, not on the flow.
// Collectives timed by T alone, without a flow: tensor-parallel ones (inside a node's NVLink) and
// the gradient-norm all-reduce (latency-bound, a few bytes).
#pragma once

#include <cstdint>
#include <span>

#include "sim/models/collectives.hpp"

namespace stagecraft::sim {

struct RingFlow {
  int64_t successor = 0;  // the GPU the member's flow goes to
  int64_t steps = 0;      // ring steps on that stage
  int64_t parts = 1;      // the buffer is cut into this many chunks (the group size)
};

// For `member` of `group` (GPU indices in placement order; members of a node consecutive).
RingFlow ring_flow(std::span<const int64_t> group, int64_t member, int64_t gpus_per_node);
// Bytes of the member's flow for a collective of `bytes` (S).
int64_t ring_flow_bytes(const RingFlow& f, CollectiveKind kind, int64_t bytes);
// The cap that makes a flow of `flow_bytes` take `time_ns` alone.
inline double ring_flow_cap_Bps(int64_t flow_bytes, int64_t time_ns) {
  return static_cast<double>(flow_bytes) * 1e9 / static_cast<double>(time_ns);
}

}  // namespace stagecraft::sim
