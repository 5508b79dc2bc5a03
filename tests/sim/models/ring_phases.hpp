// Test oracle for the collective model: a collective's ring stages (sim::collective_stages) run
// step by step as flows on an otherwise idle FlowNetwork. A phase is the transfers of one step,
// which start together and become active after the phase's α (the largest route latency among
// them); a phase ends when its last transfer ends, and the next one starts then. The analytic
// time (collective_time_ns) must equal the time these phases take.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/models/collectives.hpp"
#include "sim/network/flows.hpp"

namespace stagecraft::test {

using sim::CollectiveKind;
using sim::CollectiveStage;
using sim::FlowNetwork;
using sim::LinkId;
using sim::Topology;

struct Transfer {
  int64_t src_gpu = 0;
  int64_t dst_gpu = 0;
  int64_t bytes = 0;
};

struct Phase {
  std::vector<Transfer> transfers;  // concurrent
  int64_t latency_ns = 0;           // α of this phase: every transfer becomes active after it
};

inline std::vector<Phase> collective_phases(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                                            const Topology& topology) {
  std::vector<Phase> phases;
  for (const CollectiveStage& stage : sim::collective_stages(kind, bytes, placement, topology)) {
    Phase step;
    for (const auto& [src, dst] : stage.pairs) {
      step.latency_ns = std::max(step.latency_ns, topology.latency_ns(src, dst));
      step.transfers.push_back({src, dst, stage.chunk_bytes});
    }
    for (int64_t s = 0; s < stage.steps; ++s) phases.push_back(step);
  }
  return phases;
}

// Runs phases one after another on an idle FlowNetwork; the time the last phase ends.
inline int64_t simulate_phases_ns(std::span<const Phase> phases, const Topology& topology) {
  FlowNetwork network(topology);
  std::vector<LinkId> path;
  for (const Phase& phase : phases) {
    for (const Transfer& t : phase.transfers) {
      topology.route_into(t.src_gpu, t.dst_gpu, path);
      network.start_flow(path, t.bytes, phase.latency_ns);
    }
    while (network.flow_count() > 0) network.advance_to(network.next_event_time_ns());
  }
  return network.now_ns();
}

}  // namespace stagecraft::test
