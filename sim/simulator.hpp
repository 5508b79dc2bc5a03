// Simulator: runs a Program in virtual time on a cluster and says how long a step takes, where
// the time goes and what each GPU holds at its peak (SCHEMAS.md "simulate --json").
//
// Engine: every simulated rank runs its instruction list; an instruction starts when the previous
// instruction of its lane and its explicit dependencies are done (docs/program.md). Events are
// ordered by (time_ns, sequence). Time is integer nanoseconds, so a run is exactly reproducible.
//  * compute, optimizer, offload copies: compute.hpp durations;
//  * p2p: a flow of the message's bytes on the route between the two GPUs (FlowNetwork, max-min
//    shared with every other flow); the receive completes when the flow has and it is posted;
//  * collectives: start when every simulated member of the group has issued them; the group's
//    contention-free time T comes from the collective model (collectives.hpp) over the group's
//    real placement; each simulated member then puts one flow on the links to its ring
//    successor, carrying the bytes it sends ((n−1)/n·S, twice for all-reduce) with a rate cap of
//    bytes/T — alone it takes exactly T, sharing a link with other flows it slows down;
//    tensor-parallel collectives stay inside a node's NVLink and are timed by T alone.
// Symmetry: by default one data-parallel replica is simulated with one tp rank per stage (all tp
// peers of a stage and all replicas run the same list at the same times); group members outside
// that set are taken to arrive together with it. `full` simulates every rank.
// Memory (memory.hpp): model states, activations from a micro-batch's Forward to the end of its
// Backward (BackwardWeight with zero-bubble), recomputed blocks during their backward, gathered
// ZeRO-3 buckets from Gather to Release, p2p and gradient-bucket buffers, reserved bytes. The
// peak is taken over a rank's changes in time order, frees before allocations at equal times.
// Speed: a replica's tensor-parallel collectives (fixed time, no flow) finish without the event
// queue when nothing they release can touch the network or another rank (simulator.cpp,
// "Folding"); docs/simulator.md lists the rest and the benchmark.
// Breakdown per rank (a partition of the step): compute = compute lane busy; exposed
// communication = compute idle while a communication of this rank is in flight; bubble = the rest.
#pragma once

#include <cstdint>
#include <string>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "core/trace/trace.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::sim {

struct SimOptions {
  bool full = false;                 // every rank instead of one replica, one tp rank per stage
  bool record_trace = false;
  bool free_communication = false;   // communication takes no time (bubble analysis)
};

struct SimResult {
  Metrics metrics;
  trace::Trace trace;                 // when SimOptions::record_trace
};

// Pure and reentrant. Throws std::invalid_argument when the cluster cannot hold the plan (too
// few GPUs, no peak for the dtype).
SimResult simulate(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options = {});

}  // namespace stagecraft::sim
