// Collective flows: how the simulator puts a collective on the FlowNetwork, so that it contends
// with pipeline traffic and with other collectives (the one mapping from a collective to flows).
// The collective's contention-free time T comes from the collective model (collectives.hpp) over
// the group's real placement. Each simulated member of the group then puts one flow on the route
// to its ring successor on the links that bound the collective:
//   * all members on one node: the ring over NVLink, successor = the next member, carrying what a
//     ring member sends, ⌈S·(n − 1)/n⌉ bytes;
//   * members on N > 1 nodes (k = n/N per node): the node's ring crossing, successor = the member
//     n/N places on in the group (the same local position on the next node, leaving through the
//     member's NIC). A node's crossing carries ⌈S·(n − 1)/n⌉ bytes spread over its k members'
//     NICs (NCCL's channels use every NIC), so the member's flow carries ⌈⌈S·(n − 1)/n⌉ / k⌉;
// twice that for an all-reduce (its reduce-scatter and all-gather halves; S the buffer, n the group
// size), with a rate cap of bytes / T, so that alone on its links the flow ends after T (to the
// rounding of one transfer) and sharing a link it is slowed by max-min fairness.
// Collectives timed by T alone, without a flow: tensor-parallel ones (inside a node's NVLink) and
// the gradient-norm all-reduce (latency-bound, a few bytes).
#pragma once

#include <cstdint>
#include <span>

#include "sim/models/collectives.hpp"

namespace stagecraft::sim {

struct RingFlow {
  int64_t successor = 0;  // the GPU the member's flow goes to
  int64_t parts = 1;      // the group size n
  int64_t share = 1;      // members sharing the node's crossing (k = n/N across nodes, 1 inside one)
};

// For `member` of `group` (GPU indices in placement order; members of a node consecutive).
RingFlow ring_flow(std::span<const int64_t> group, int64_t member, int64_t gpus_per_node);
// The same for the member at `position` in the group, with the group's node count given
// (nodes_spanned): a caller that asks for several members of one group scans it once (a world
// group of 16,384 GPUs is 16,384 steps).
RingFlow ring_flow_at(std::span<const int64_t> group, int64_t position, int64_t nodes);
// The nodes a group spans: 1 + the changes of node between consecutive members.
int64_t nodes_spanned(std::span<const int64_t> group, int64_t gpus_per_node);
// Bytes of the member's flow for a collective of `bytes` (S).
int64_t ring_flow_bytes(const RingFlow& f, CollectiveKind kind, int64_t bytes);
// The cap that makes a flow of `flow_bytes` take `time_ns` alone.
inline double ring_flow_cap_Bps(int64_t flow_bytes, int64_t time_ns) {
  return static_cast<double>(flow_bytes) * 1e9 / static_cast<double>(time_ns);
}

}  // namespace stagecraft::sim
