// Critical path of a lowered Program without contention: the second, tighter step-time bound the
// search applies just before simulating a plan (prune.hpp gives the first, without lowering).
//
// It replays the simulator's rules on the same simulated ranks (one per pipeline stage: dp
// index 0, tp index 0, as sim::simulate's replica symmetry does) with every duration at its
// contention-free value:
//   * an instruction starts when its lane predecessor and its dependencies have ended;
//   * compute, optimizer and offload copies take sim::ComputeModel's time (rounded to ns as the
//     simulator rounds them);
//   * a send takes latency + bytes / (narrowest link of its route) and a receive ends when both
//     it has started and the matching send's transfer has arrived;
//   * a collective starts when every simulated member of its group has issued it and takes the
//     collective model's time over the group's placement (sim::CollectiveCost; the minimum over
//     the placements the simulated ranks' groups take), the gradient-norm all-reduce its
//     latency-only tree time.
// The simulator can only be slower: flows that share links are slowed by max-min sharing, never
// sped up, and every start time is a max of earlier end times. So the result, less a hair for
// rounding, is a lower bound of the simulated step time — usually within a few percent of it,
// at a fraction of the simulation's cost (no flow network).
#pragma once

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"

namespace stagecraft::planner {

// The contention-free step time of `prog` on `cluster`, in seconds, times (1 − 1e-6).
double critical_path_s(const program::Program& prog, const spec::Cluster& cluster);

}  // namespace stagecraft::planner
