// Internal to the pruner (prune.hpp): the per-layout terms its bounds are built from, shared by
// prune.cpp (layouts, pipeline terms, enumeration) and prune_zero.cpp (each ZeRO variant's terms).
// Not part of the planner's interface.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/schedules/schedules.hpp"
#include "core/program/units.hpp"
#include "planner/prune.hpp"
#include "sim/models/collectives.hpp"
#include "sim/models/compute.hpp"

namespace stagecraft::planner {

using program::ChunkInfo;
using program::Unit;
using program::UnitParams;
using sim::CollectiveKind;

namespace detail {

inline double ns(int64_t t) { return static_cast<double>(t) * 1e-9; }

// One ZeRO variant (stage, overlap, offload, bucket sizes) on one layout; per-stage terms.
struct ZeroTerms {
  int8_t zero = 0;
  ZeroVariant variant = ZeroVariant::kPlain;
  bool offload = false, overlap = true;
  int8_t reduce_i = -1, prefetch_i = -1, max_live_i = -1;
  bool duplicate = false;   // the same Program as an earlier variant
  int32_t twin = -1;        // with offload: the variant without it
  // The reduce bucket (grid index) of the layout's first variant that lowers to the same
  // instructions, this one's own where none came before: variants that differ only in a reduce
  // bucket that cuts the same gradient buckets (with the same DeepSpeed IPG flushes) run alike,
  // and differ only in the gradient bucket buffer's static memory (sim::with_reduce_bucket).
  int8_t timing_reduce_i = -1;
  std::vector<int64_t> static_bytes;   // model states + gradient bucket buffer
  std::vector<double> last_reduce_s;   // reductions after the stage's last compute
  std::vector<double> once_s;          // reduce lane, once per step
  std::vector<double> per_mb_s;        // reduce lane, every micro-batch
  std::vector<double> gather_s;        // ZeRO-3 gathers, each bucket once
  std::vector<double> regather_bytes;  // ZeRO-3 bytes each micro-batch must gather again at least
  double gather_slope = 0;             // seconds per gathered byte, at least
  // ZeRO-3 when no two buckets fit under max_live_parameters together: a pass's gathers and
  // computes run one after another (gather b, compute, release b, gather the next, ...), except
  // that a gather may overlap the tp collectives between the two computes it separates.
  std::vector<double> serial_g;        // per stage: Σ_chunks 2 passes × (Σ_b T_AG(b) − max_b T_AG(b))
  std::vector<int64_t> serial_n;       // per stage: the gathers counted there (one per compute boundary)
  std::vector<double> first_extra;     // per stage: the step's first forward of each chunk, gathering each
                                       // bucket for the first time (hpZ: over the whole group), beyond serial_g's share
  std::vector<double> first_g;         // per stage: chunk 0's first forward pass's serial gathers
  std::vector<double> again_g;         // per stage: those of any later pass of chunk 0 (hpZ: the secondary partition's)
  std::vector<int64_t> first_n;
  std::vector<double> serial_switch;   // per stage: a step on another chunk than the step before
                                       // finds none of its buckets resident: min_c (longest gather)
  std::vector<double> after_s;         // gradient norm + optimizer + ZeRO-1/2 parameter all-gather
  // Plain ZeRO-3 whose gathers and reductions share one communicator (the framework's rule,
  // FrameworkProfile::one_dp_communicator): the reductions' time on it, once a step and every
  // micro-batch, which adds to the gathers' (each waits for the collective before it); empty else.
  std::vector<double> shared_once_s, shared_per_mb_s;
};

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1, v = 1;
  Split split = Split::kBalanced;
  bool duplicate = false;               // uniform split equal to the balanced one
  std::vector<Unit> units;
  std::vector<int64_t> chunk_layers;    // model order
  std::vector<int64_t> stage_layers;
  std::vector<ChunkInfo> chunks;        // stage-major, params filled
  std::vector<std::vector<UnitParams>> params;   // [stage][unit]
  std::vector<int64_t> stage_params, stage_persistent;
  // expert parallelism: ep, etp, the experts' data-parallel group edp, and where it is not the
  // dense one (experts_apart) each stage's routed-expert parameters, outside `params` and stage_params
  int64_t ep = 1, etp = 1, expert_dp = 1;
  bool experts_apart = false;
  std::vector<int64_t> stage_experts;
  std::vector<ZeroTerms> variants;

  const ChunkInfo& chunk(int64_t s, int64_t c) const { return chunks[static_cast<std::size_t>(s * v + c)]; }
  // Whether a chunk receives from / sends to another chunk (model order: stage-fastest).
  bool has_prev(const ChunkInfo& c) const { return c.stage > 0 || c.chunk > 0; }
  bool has_next(const ChunkInfo& c) const { return c.stage < pp - 1 || c.chunk < v - 1; }
};

// The cp groups' all-gather, reduce-scatter and all-to-all over every distinct placement the
// simulated ranks' groups take.
struct CpCosts {
  std::vector<sim::CollectiveCost> ag, rs, a2a;
};

// The experts' tensor-parallel groups' all-gather and reduce-scatter over every distinct placement.
struct EtpCosts {
  std::vector<sim::CollectiveCost> ag, rs;
  std::vector<sim::CollectiveCost> dispatch;   // over the tensor-and-expert-parallel groups: the flex dispatcher's
};

struct CommCosts {
  std::vector<sim::CollectiveCost> dp_ag, dp_rs, dp_ar;   // one per distinct placement of the stages' groups
  // ZeRO across nodes, over a node's data-parallel ranks L (Space::node_dp): the shard group's
  // all-gather and reduce-scatter, the replicas' all-reduce and qgZ's all-to-all across nodes
  std::vector<sim::CollectiveCost> shard_ag, shard_rs, replica_ar, shard_a2a, cross_a2a;
  int64_t node_dp = 0;      // L, 0 when no variant applies
  double shard_ag_slope = 0;
  std::optional<sim::CollectiveCost> tp_ag, tp_rs, tp_ar, tied_ar;
  std::map<int64_t, CpCosts> cp;   // context parallelism, by cp (filled on first use)
  std::map<std::pair<int64_t, int64_t>, std::vector<sim::CollectiveCost>> ep;   // expert parallelism's all-to-all, by (ep, etp) (likewise)
  std::map<std::tuple<int, int64_t, int64_t>, EtpCosts> etp;   // the experts' gathers and scatters, by (group, ep, etp) (likewise)
  std::vector<sim::CollectiveCost> p2p;                   // boundary s -> s+1, then the wrap p-1 -> 0
  double gradnorm_s = 0;
  double dp_ag_slope = 0;   // d(all-gather time)/d(bytes): T_AG(S) >= slope · S

  // T(S) = Σ_stages steps·(α + ⌈⌈S/div⌉·1e9/β⌉) ns >= S · Σ steps/(div·β): the slope between two
  // large sizes, less a hair for the rounding.
  static double slope(const std::vector<sim::CollectiveCost>& list) {
    const int64_t x = int64_t{1} << 32;
    double best = -1;
    for (const sim::CollectiveCost& c : list) {
      const double s = ns(c.time_ns(2 * x) - c.time_ns(x)) / static_cast<double>(x);
      if (best < 0 || s < best) best = s;
    }
    return std::max(0.0, best) * (1 - 1e-6);
  }
  void set_slope() {
    dp_ag_slope = slope(dp_ag);
    shard_ag_slope = shard_ag.empty() ? 0.0 : slope(shard_ag);
  }

  // The least time of a collective of `bytes` over the placements of `list`.
  static double least_s(const std::vector<sim::CollectiveCost>& list, int64_t bytes) {
    int64_t best = -1;
    for (const sim::CollectiveCost& c : list) {
      const int64_t t = c.time_ns(bytes);
      if (best < 0 || t < best) best = t;
    }
    return best < 0 ? 0.0 : static_cast<double>(best) * 1e-9;
  }
  double dp_s(CollectiveKind kind, int64_t bytes) const {
    return least_s(kind == CollectiveKind::kAllGather ? dp_ag : kind == CollectiveKind::kReduceScatter ? dp_rs : dp_ar, bytes);
  }
};

// One chunk's durations for one micro-batch.
struct ChunkTimes {
  double fwd_chain = 0;    // F + its tp collectives (what the next stage waits for)
  double bwd_chain = 0;    // B (or B-input with ZB-H1) + R + their tp collectives
  double busy = 0;         // F + B + R + W + tp collectives, less one op per pass
  // Per pass (the forward; the backward, or ZB-H1's B, with R; ZB-H1's W), from its first
  // compute: its computes and the collectives between them (serial), then those after its last
  // compute, before its message can leave (out); a forward's received-message all-gather
  double fwd_serial = 0, bwd_serial = 0, w_serial = 0;
  double fwd_out = 0, bwd_out = 0, recv_fwd = 0;
  double act_bytes = 0;    // one activation set
  int sends = 0;           // pipeline sends per micro-batch (forward to the next chunk, backward to the previous)
  // the collectives before each pass's first compute, which need not wait for the send before it
  // (a blocking send holds the next compute only): what of each send they may hide
  double pre_fwd = 0, pre_bwd = 0;
};

// Per-stage pipeline terms of one (layout, compute, schedule, m).
struct PipeTerms {
  std::vector<double> head, tail, busy, first_fwd, held;
  std::vector<int64_t> switches;   // per stage: parameter-using steps on another chunk than the one before
  double tp_gap = 0;               // most tp collective time between two computes of a pass
  double step_gap = 0;             // most time between two steps' computes besides compute: tp + p2p
  double link = 0;                 // the fastest pipeline send
  // per stage: the earliest end of its last compute by the pipeline's critical path over whole
  // passes (pipeline_path); empty where it was not computed
  std::vector<double> path;
  int64_t p2p_buffers = 0;
  bool zb = false;
  // what `path` is computed from, on demand (add_path): only a candidate that fits in memory
  // reads it, and most of a large space's do not. `steps` is the Pruner's (Pruner::steps), kept
  // until the Pruner moves to another (tp, pp).
  const std::vector<std::vector<program::Step>>* steps = nullptr;
  std::vector<ChunkTimes> times;
  std::vector<double> links;
  int64_t micro_batches = 0, v = 1;
  bool path_added = false;
};

// Fills `t.path` once (pipeline_path over the inputs `t` keeps).
void add_path(PipeTerms& t);

// The pipeline's critical path over whole passes, in the schedule's own order. A step's first
// compute starts no earlier than
//   * the end of the stage's previous step's last compute: that one's first compute + serial;
//   * the arrival of the previous step's message (the plans' blocking sends, without overlap_p2p):
//     its last compute's end + out + the link;
//   * a forward: the arrival of the previous model chunk's forward message for that micro-batch
//     (+ its all-gather without sequence parallelism); a backward (ZB-H1's B): that of the next
//     model chunk's backward message; a W: nothing more (its B is earlier on the stage).
// The collectives before a pass's first compute are left out (they may run beside the step
// before), so each term is at most what the simulator charges; the path adds the bubbles the
// schedule's order forces inside the step, which head + busy + tail count only at its ends.
// steps[s]: stage s's steps (program::schedule_steps); times[s·v + c]: chunk c of stage s (model
// position c·p + s); link[i]: the send from stage i to i + 1, link[p − 1] the wrap p − 1 → 0.
// Returns, per stage, the earliest end of its last compute; empty if the steps cannot all be
// ordered (never for the schedules the lowering builds).
std::vector<double> pipeline_path(const std::vector<std::vector<program::Step>>& steps, int64_t v, int64_t m,
                                  const std::vector<ChunkTimes>& times, const std::vector<double>& link);

}  // namespace detail

namespace detail {

// The ZeRO variant fields of a candidate, both ways.
ZeroTerms variant_of(const Candidate& c);
void set_variant(Candidate& c, const ZeroTerms& z);
// One variant's per-stage terms on `lay` (ZeroTerms); `sig` gets what makes its Program differ from
// another variant's (equal signatures: the same Program).
struct VariantMemo;   // prune_zero.cpp: what one layout's variants share
void build_variant(ZeroTerms& z, const Layout& lay, const CommCosts& cc, const Space& space, const sim::ComputeModel& cm,
                   std::vector<int64_t>& sig, VariantMemo* memo = nullptr);
// Every variant the space gives the layout, in enumeration order, duplicates and offload twins marked.
void build_variants(Layout& lay, const CommCosts& cc, const Space& space, const sim::ComputeModel& cm);

}  // namespace detail
}  // namespace stagecraft::planner
