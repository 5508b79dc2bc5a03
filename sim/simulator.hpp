// Simulator: runs a Program in virtual time on a cluster and says how long a step takes, where
// the time goes and what each GPU holds at its peak (SCHEMAS.md "simulate --json"). The parts:
//   simulation.hpp          the Program rules: every simulated rank runs its instruction list; an
//                           instruction starts when the previous instruction of its lane and its
//                           explicit dependencies are done (docs/program.md); compute,
//                           optimizer and offload copies take the compute model's time
//                           (models/compute.hpp); a receive completes when its message has
//                           arrived and it is posted; a collective starts when every simulated
//                           member of its group has issued it;
//   engine/                 the event loop (events by (time_ns, sequence), the network's next
//                           event) and the interval toolkit of the time breakdown;
//   network/                links shared by max-min fairness (FlowNetwork);
//   models/collective_flows how a collective becomes network flows; models/ the costs;
//   costs.hpp               the contention-free durations, cached per group placement;
//   memory_accounting.hpp   what a rank holds over time, by kind, and its peak;
//   symmetry.hpp            which ranks are simulated.
// Time is integer nanoseconds, so a run is exactly reproducible.
// Networks (SimOptions::network), SimGrid's way of offering a contention-free network model beside
// the shared one:
//   kShared          p2p messages and data-parallel collectives are flows on the FlowNetwork and
//                    contend for links (models/collective_flows.hpp); the default;
//   kContentionFree  every message and collective takes its time alone (a send latency +
//                    bytes / narrowest link, a collective its collective-model time T) — the
//                    planner's critical-path bound: flows that share links are slowed, never sped
//                    up, and every start time is a max of earlier end times, so the shared network
//                    can only be slower;
//   kFree            communication takes no time (bubble analysis).
// Fast paths (SimOptions::fast_paths, on by default; off gives the same results, slower — a test
// compares the traces): one data-parallel replica with one tp rank per stage stands for all
// (symmetry.hpp; `full` simulates every rank and keeps the other fast paths); a replica's
// collectives timed by T alone finish without the event queue when nothing they release can touch
// the network or another rank (simulation.cpp, "Folding"); on a contention-free or free network
// every instruction completes without the queue (simulation.hpp, eager completion); a
// step-time-only simulation given the Program's chains (SimOptions::chains) times each run of
// compute and tensor-parallel collectives in one go (chains.hpp: a pass's gathers, computes and
// reductions, with an event only where something outside the run waits for one of them); the
// FlowNetwork settles the changes that leave a flow alone or pair it with one other in place.
// docs/simulator.md lists the benchmark.
// Breakdown per rank (a partition of the step): compute = compute lane busy; exposed
// communication = compute idle while a communication of this rank is in flight; bubble = the rest.
#pragma once

#include <array>
#include <limits>
#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "core/trace/trace.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::sim {

struct Chains;

enum class NetworkModel : uint8_t { kShared, kContentionFree, kFree };

struct SimOptions {
  bool full = false;          // every rank instead of one replica, one tp rank per stage
  bool record_trace = false;
  NetworkModel network = NetworkModel::kShared;
  bool fast_paths = true;     // off: every rank, no folding or eager completion, every rate change through the general solver
  bool step_time_only = false;  // skip memory and the time breakdown (their metrics stay 0)
  // With step_time_only (and fast_paths): the Program's chains (sim/chains.hpp find_chains, by
  // role), timed in one go each. Finding them costs about what they save in one simulation, so a
  // caller that runs several simulations of one Program finds them once (the error bars); chains
  // found without the overlap rule are ignored where NCCL's slowdown of compute is charged. Null:
  // none.
  const std::vector<Chains>* chains = nullptr;
  // > 0: the MoE load imbalance ρ in place of the training's moe_imbalance (the error bars'
  // perturbation of a stated moe_imbalance_sigma; sim/uncertainty.hpp).
  double moe_imbalance = 0;
  // On a contention-free or free network (eager completion): stop at the first instruction that
  // ends after this many ns; the ranks' last ends then say only that the step is longer.
  int64_t stop_after_ns = std::numeric_limits<int64_t>::max();
  // Each simulated rank as if every peer were always ready: a receive completes when posted, a
  // collective starts when the rank issues it (contention_free_stage_s).
  bool alone = false;
};

struct SimResult {
  Metrics metrics;
  trace::Trace trace;         // when SimOptions::record_trace
  // Each simulated rank's largest memory sample (its rank, moment and bytes by kind), in rank
  // order: what the per-stage memory table reads (report.hpp stage_memory).
  std::vector<trace::MemorySample> rank_peaks;
  // Per lane (program::Lane): the mean time the simulated ranks' instructions waited for other
  // ranks (a collective for its last member, a receive for its message), seconds; the ranks of a
  // straggling GPU or node (spec::Straggler) left out. straggler.hpp reads it.
  std::array<double, program::kLaneCount> others_wait_s{};
};

// Another reduce bucket for a simulated plan, where both cut the same gradient buckets with the
// same collectives (the planner's timing twins: planner/prune_detail.hpp ZeroTerms::timing_reduce_i).
// The reduce bucket then changes no instruction, only the ZeRO-2/3 gradient bucket buffer,
// min(reduce_bucket, P_s)·w (models/memory.hpp), a constant per stage: every sample of a rank of
// stage s moves by the difference Δ_s, its largest stays the same sample, and the plan's peak is
// the largest of the moved rank peaks (the first in rank order among equal ones, as simulate
// picks). The step time and its breakdown are the simulated plan's.
struct ReduceBucketBase {
  Metrics metrics;
  std::vector<trace::MemorySample> rank_peaks;   // SimResult::rank_peaks
  std::vector<int64_t> peak_stage_params;        // per rank peak: its stage's parameters (stage_params)
  spec::ZeroConfig zero;
  int64_t dp = 1, param_bytes = 2;
};
ReduceBucketBase reduce_bucket_base(const SimResult& result, const program::Program& prog);
Metrics with_reduce_bucket(const ReduceBucketBase& base, int64_t reduce_bucket);

// Pure and reentrant. Throws SimError when the cluster cannot hold the plan (too few GPUs, no
// peak for the dtype).
SimResult simulate(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options = {});

// The step time of `prog` on an uncontended network (NetworkModel::kContentionFree), seconds,
// times (1 − 1e-6) for the nanosecond rounding of capped flows: a lower bound of simulate()'s.
double contention_free_step_s(const program::Program& prog, const spec::Cluster& cluster);
// The same where only whether it exceeds `above` matters (the planner's cut after lowering): the
// step time itself where it is at most `above`; otherwise a time past `above` and no later than
// the step time — the simulation stops at the first instruction that ends past `above`, whose
// end can only precede the step's.
double contention_free_step_s(const program::Program& prog, const spec::Cluster& cluster, double above);
// A lower bound of contention_free_step_s from one stage's list (a Program lowered with
// program::LowerOptions::only_stage, any stage): that stage's instructions on the uncontended
// network, each receive complete when posted and each collective started when the stage issues
// it. Every start in the contention-free run is the latest end among its predecessors, lane and
// peers, and every duration is fixed (nothing shares a link or an SM there), so dropping the waits
// for peers can only move an instruction earlier: the stage's last end, scaled as above, is no
// later than the whole step's. The pipeline's ends join it where the stage is not the first
// (stage S): the first activation it receives (micro-batch 0, chunk 0) is made by chunk 0's
// forward on each of the stages before it, one after another, so it arrives no sooner than
// F = Σ_{s<S} t_fwd(chunk(s, 0)); and a gradient it sends from chunk 0 at t is consumed by
// chunk 0's backward on each of them in turn, so the step ends no sooner than t + D,
// D = Σ_{s<S} t_bwd(chunk(s, 0)) (ZB-H1's input-gradient pass) — compute alone, by
// the compute model's unit times, the transfers, gathers and collectives between left out. For a
// 1F1B pipeline F + D is the bubble, (S)(t_f + t_b) on the last stage. `above` stops it early as
// above. A cluster with a straggler is refused (SimError): the bound would need every rank of the
// stage.
double contention_free_stage_s(const program::Program& prog, const spec::Cluster& cluster, double above);

}  // namespace stagecraft::sim
