// Chains: runs of a rank's instructions whose times all follow from the first one's start, so a
// step-time-only simulation can time the run in one go instead of one event per instruction.
// Internal to the simulator (simulation.hpp uses it); exact, not an approximation.
//
// A chain is a contiguous index range [begin, end) of one instruction list, at least two long,
// whose members are
//   * compute instructions (forward, backward and recompute passes; their time is the compute
//     model's, and where NCCL kernels share the GPU, compute_ns's slowdown, which only a
//     data-parallel collective overlapping them can add: see "overlap-free" below), or
//   * tensor-parallel collectives (timed by T alone, no flow; the simulator uses them only where
//     the rank is the one simulated member of its tp group, so no other rank's arrival is waited for);
// and where every member but the first
//   * has at least one predecessor inside the chain (so it can never become ready before the first
//     member has started), and
//   * has every other predecessor among the first member's ancestors (finished before the first
//     member starts; found by a bounded backward search, which says no when unsure).
// Then, once the first member starts at t, each member starts at the latest end among its
// predecessors inside the chain and ends its own time later: a longest path over the chain, known
// at t. Members with a successor outside the chain ("exits") still finish as events at their own
// end times, releasing those successors exactly when they would have been; the other members need
// no event at all. A tensor-parallel plan's pass (per layer: gather, compute, reduce-scatter) is
// one chain with two exits, the last compute and the last collective, so the event loop sees 2
// events where it saw some 6 per layer.
// Shapes. A member's time depends only on what it does (its work, its collective's size and
// group), since no collective runs beside a chained compute (below) and tensor-parallel ones are
// timed alone, so two chains with the same members one for one — the same work, the same
// successors inside the chain at the same offsets, exits alike — take the same times from their
// start. `shape` names each chain's first twin; the simulation times a shape once.
//
// Overlap-free compute. Where the simulator charges NCCL's kernels beside compute (simulation.hpp),
// a compute instruction's time depends on the data-parallel collectives that run during it, which
// a chain timed at its first member's start cannot know. A compute instruction c is overlap-free
// when every data-parallel collective d of its list is ordered with it by the graph — an ancestor
// of c (it ended before c starts) or a descendant (it starts after c ends). With the compute lane a
// total order, d's ancestors on it are the positions up to A(d) = the latest compute among d's
// ancestors, and its descendants those from D(d) = the earliest among its descendants; positions
// strictly between may overlap d, and D(d) itself may be charged the slowdown owed from its
// predecessor on the lane (simulation.hpp: "the extra time goes to the next compute-lane
// instruction"), so A(d) < p ≤ D(d) is not overlap-free when D(d) − A(d) > 1. Two linear passes
// over the graph (A forward, D backward) find them; where the slowdown is charged only
// overlap-free compute joins a chain.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/graph.hpp"
#include "core/program/program.hpp"

namespace stagecraft::sim {

struct Chains {
  std::vector<int32_t> of;      // per instruction: its chain, −1 for none
  std::vector<uint8_t> exit;    // per instruction: a member with a successor outside its chain
  std::vector<int32_t> begin;   // per chain: its first instruction
  std::vector<int32_t> end;     // per chain: one past its last
  std::vector<int32_t> shape;   // per chain: the first chain of the same shape (the same members
                                // one for one, so the same times from its start), itself if none
  std::size_t members = 0;      // instructions in some chain
  bool overlap_free = true;     // only overlap-free compute joined (else valid only where no slowdown is charged)
  bool entry(int32_t k) const {
    const int32_t c = of[static_cast<std::size_t>(k)];
    return c >= 0 && begin[static_cast<std::size_t>(c)] == k;
  }
};

// The chains of one instruction list, and of every list of a Program (by role). `overlap_free`:
// only overlap-free compute may join (needed where the simulation charges NCCL beside compute;
// such chains serve every simulation). They depend on the lists alone, so simulations of one
// Program on perturbed clusters share them (SimOptions::chains).
Chains find_chains(const program::RoleProgram& role, const program::RoleGraph& graph, bool overlap_free);
std::vector<Chains> find_chains(const program::Program& prog, bool overlap_free);

}  // namespace stagecraft::sim
