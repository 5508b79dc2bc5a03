// Pruning before simulation: for every candidate of the plan space, a lower bound on its peak
// memory and on its step time, both from the simulator's own analytic models, so that
//   memory_lb > GPU memory            => the simulator would say it does not fit  (pruned: memory)
//   step_time_lb > K-th best so far   => it cannot enter the top K                (pruned: bound)
// plus dominance rules that drop candidates whose Program is identical to an earlier one, or
// that cannot help (pruned: dominated).
//
// Memory lower bound, per pipeline stage s (max over stages), sim/models/memory.hpp:
//   model_states(P_s, persistent_s, ZeRO, dp) + reserved + p2p buffers 2·(tokens·h/t)·a (pp > 1)
//   + the ZeRO >= 2 gradient bucket min(reduce_bucket, P_s)·w  +  A_s
// where A_s is what the schedule must hold at once when its last warm-up forward starts
// (program::warmup_held_sets: GPipe m sets; 1F1B and ZB-H1 min(p − s, m) sets; interleaved the
// first min(warm-up + 1, m·v) forward passes, pass k holding chunk (k mod pv) div p); a set =
// tokens · Σ activation_bytes_per_token over the chunk's units (Korthikanti et al.). Chunk
// placement, stage layers, the message sizes, where the tensor-parallel collectives go
// (core/program/comm_rules.hpp) and the buffers (sim/models/memory.hpp) are the lowering's and
// the simulator's own functions.
//
// Step-time lower bound (every term is a duration the simulator charges exactly):
//   F, B, W, R   compute of one micro-batch on a chunk (sim::ComputeModel: forward, backward,
//                zero-bubble weight gradient, full recompute of its blocks);
//   TP           the tensor-parallel collectives a pass issues, chained with its compute (and,
//                without sequence parallelism, the all-gather of each received activation —
//                Megatron's scatter-gather): a stage runs compute and tp collectives one after
//                another, except that a step's last collective may overlap the next step's
//                first compute (so one op per pass is not counted);
//   p2p          send/recv of one activation between consecutive stages, alone on the network;
//                without overlap_p2p (the plans' default) a stage computes on only once its
//                previous send has arrived, so every send but the last is on its compute lane;
//   busy_s       m · Σ_chunks (F + B + R + TP − one op per pass) + sends · p2p: the stage's lane;
//   head_s       Σ_{j<s} (F + TP)_{j,0} + p2p: before stage s can start its first forward;
//   tail_s       Σ_{j<s} (B + R + TP)_{j,0} + p2p: after stage s's last backward, stage 0 still
//                back-propagates that micro-batch (not for ZB-H1, whose last op may be a W);
//   dp_tail_s    after a stage's last compute: the gradient reductions that depend on it (the
//                last bucket; every deferred one without overlap_comm; the tied-embedding
//                all-reduce on stage 0), the gradient-norm all-reduce, the optimizer step (GPU, or
//                offload copies + host Adam) and ZeRO-1/2 parameter all-gathers;
//   lanes        a stage's reduce lane carries every gradient reduction (each micro-batch for
//                ZeRO-2/3, but once a step the bucket of an embedding table tied over stages, the
//                table's sum over the embedding group, and the replicas' all-reduce where the
//                framework syncs replicas at the step: DeepSpeed's MiCS), its gather lane every
//                ZeRO-3 bucket at least once, and the bytes that max_live_parameters forces it to
//                gather again each step (at most max(max_live, biggest bucket) elements stay
//                resident between steps); where
//                the framework puts plain ZeRO-3's gathers and reductions on one communicator
//                (FrameworkProfile::one_dp_communicator: DeepSpeed ZeRO-3 with tp > 1), each
//                starts after the one before, so the two lanes' times add;
//   ZeRO-3       when no two buckets fit under max_live_parameters, a pass alternates gather and
//                compute (gather, compute, release, gather the next): Σ_b T_AG(b) − max_b T_AG(b)
//                per pass joins busy_s, less the tp collectives a gather may overlap (hpZ: the
//                step's first forward of each chunk gathers over the whole group, every later pass
//                over the secondary partition), and a step on another chunk than the step before
//                (interleaved) gathers all of its buckets.
//   buckets      a data-parallel bucket's gather or reduction is timed as the simulator times it
//                (sim/costs.hpp): the framework's k collectives of ⌈S/k⌉ and its copies, quantize
//                kernels and host work around them (sim::framework_work), over the group the
//                lowering issues it on (MiCS's two-level gather: its cheaper level alone; qgZ's
//                all-to-alls: their NCCL time alone).
//   path_s       the pipeline's critical path over whole passes in the schedule's own order
//                (prune_detail.hpp pipeline_path): each step's first compute waits for the stage's
//                previous compute, for the arrival of the stage's previous (blocking) send, and for
//                the message it consumes; a pass lasts its computes and the collectives between
//                them, and its message leaves after the collectives that follow its last compute.
//                It adds the bubbles inside the step (ZB-H1's and interleaving's, the sends' waits)
//                that head + busy + tail count only at its ends;
//   T_lb = max_s max( head_s + busy_s + tail_s + dp_tail_0,  head_s + busy_s + dp_tail_s,  path_s + dp_tail_s,
//                     head_s + (F+TP)_{s,0} + reduce_lane_s + after_s,  gather_lane_s,
//                     [one communicator] reduce_lane_s + gather_lane_s )
// Expert parallelism (a mixture-of-experts model): a layout holds its ranks' E/ep experts (the
// units' shapes and FLOPs, program::model_units); where the experts' data-parallel group is not the
// dense one, the ZeRO terms cover the dense parameters alone and the memory bound adds the
// experts' states partitioned over their own group (sim::model_states over edp); their gradient
// reductions and the all-to-alls are left out of the time bound (a bound without them still is
// one); ZeRO-3 and ZeRO across nodes are not candidates then (spec::validate_plan).
// Context parallelism: a layout's data-parallel group is its dp·cp ranks (G/(tp·pp), what ZeRO
// partitions over and gradients are reduced over, whatever cp is), so layouts and their ZeRO
// terms are shared by every cp; a candidate's compute, tp collectives, messages and activations
// are its rank's tokens' (micro_batch·seq_len/cp) and its micro-batches B/(dp·mb). Each attention
// pass's cp collectives join its chain where the lowering puts them (comm_rules.hpp): the blocking
// ones (all_gather, a2a) add their time, the p2p ring what it takes beyond the unit's compute
// (what follows waits for both); each timed over the least of the cp groups' placements.
// Collectives are timed with sim::CollectiveCost over the group's placement (the minimum over
// the placements the stages' groups take); contention only slows them, so each is a bound.
// A small relative margin absorbs the simulator's nanosecond rounding.
//
// Dominance rules (each names why the candidate adds nothing):
//   * identical Program: bucket values that cut the same buckets (a bucket larger than every
//     chunk), max_live_parameters values that decide alike (every value in (0, smallest gathered
//     bucket), every value from the most a stage gathers up), a uniform split equal to the
//     balanced one, ZeRO stages with dp = 1;
//   * optimizer offload only where the same plan without offload cannot fit (memory bound).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/schedules/schedules.hpp"
#include "core/program/zero.hpp"
#include "planner/space.hpp"
#include "sim/models/collectives.hpp"
#include "sim/models/compute.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::planner {

enum class Verdict : uint8_t { kKeep, kDominated, kMemory };

struct Estimate {
  double step_time_lb_s = 0;     // no simulation of this plan is faster
  int64_t memory_lb_bytes = 0;   // its simulated peak memory is at least this
  // The reduce bucket (grid index) of the first plan of its layout that runs the same
  // instructions, differing at most in the gradient bucket buffer's memory (sim::with_reduce_bucket);
  // the plan's own reduce_i where it is that first one.
  int8_t timing_reduce_i = -1;
};

// A unit of enumeration work: every candidate with this tp, pp, cp (and its comm type) and
// micro-batch size.
struct Group {
  int64_t tp = 1, pp = 1, micro_batch = 1;
  int64_t cp = 1;
  spec::CpComm cp_comm = spec::CpComm::kP2p;
  int64_t ep = 1, etp = 1;
  spec::MoeDispatcher moe_dispatcher = spec::MoeDispatcher::kAllToAll;
};
// The groups of a space, in the fixed order candidates are numbered by.
std::vector<Group> groups(const Space& space);

namespace detail {
struct Layout;
struct CommCosts;
struct CpCosts;
struct EtpCosts;
struct PipeTerms;
struct ZeroTerms;
}  // namespace detail

// Not thread-safe (it caches per layout); give each thread its own, over one shared Space.
class Pruner {
 public:
  explicit Pruner(const Space& space);
  ~Pruner();
  Pruner(const Pruner&) = delete;
  Pruner& operator=(const Pruner&) = delete;

  using Visitor = std::function<void(const Candidate&, Verdict, const Estimate&)>;
  // Every candidate of `group` in a fixed order, with its verdict and bounds (a dominated
  // candidate's are not computed: zeros).
  void enumerate(const Group& group, const Visitor& visit);
  // The bounds of one candidate (which need not come from the space's axes).
  Estimate estimate(const Candidate& c);

 private:
  const detail::Layout& layout(int64_t tp, int64_t pp, int64_t v, Split split, int64_t ep = 1, int64_t etp = 1);
  detail::CommCosts& comm(int64_t tp, int64_t pp);
  const detail::CpCosts& cp_costs(int64_t tp, int64_t pp, int64_t cp);
  const std::vector<sim::CollectiveCost>& ep_costs(int64_t tp, int64_t pp, int64_t ep, int64_t etp);
  // The all-gather and reduce-scatter over the experts' tensor-parallel groups (Group::kExpertTp)
  // or their tensor-and-expert-parallel groups (Group::kExpertTpEp, the all-gather dispatcher's).
  const detail::EtpCosts& expert_costs(int64_t tp, int64_t pp, int64_t ep, int64_t etp, program::Group group);
  bool flex_is_all_to_all(const Group& g);
  // Every stage's steps (program::schedule_steps), kept for the pair (tp, pp) in hand.
  const std::vector<std::vector<program::Step>>& steps(int64_t p, int64_t m, int64_t v, spec::Schedule schedule);
  // Per stage, the interleaved schedule's steps on another chunk than the step before.
  const std::vector<int64_t>& switches(int64_t p, int64_t m, int64_t v);
  const sim::ComputeModel& compute(int64_t tp, bool sp, spec::Recompute rc, int64_t mb, int64_t cp = 1,
                                   spec::CpComm comm = spec::CpComm::kP2p, int64_t ep = 1, int64_t etp = 1,
                                   spec::MoeDispatcher dispatcher = spec::MoeDispatcher::kAllToAll);
  detail::PipeTerms pipe(const detail::Layout& lay, int64_t mb, bool sp, spec::Recompute rc, spec::Schedule schedule,
                         int64_t cp, spec::CpComm comm, spec::MoeDispatcher dispatcher = spec::MoeDispatcher::kAllToAll);
  void enumerate_layout(const Group& g, const detail::Layout& lay, int64_t v, spec::Schedule schedule,
                        const Visitor& visit);

  const Space& space_;
  sim::Topology topology_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t>, std::unique_ptr<detail::Layout>> layouts_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<detail::CommCosts>> comms_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int64_t>> switches_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::vector<std::vector<program::Step>>> steps_;
  struct ComputeEntry;
  std::map<std::tuple<int64_t, bool, int, int64_t, int64_t, int, int64_t, int64_t, int>, std::unique_ptr<ComputeEntry>> computes_;
};

}  // namespace stagecraft::planner
