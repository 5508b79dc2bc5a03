#include "planner/prune.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/program/comm_rules.hpp"
#include "core/program/partition.hpp"
#include "core/program/schedules/schedules.hpp"
#include "core/program/units.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::planner {

using program::ChunkInfo;
using program::Op;
using program::Unit;
using program::UnitKind;
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
  std::vector<double> first_g;         // per stage: chunk 0's forward-pass share of serial_g
  std::vector<int64_t> first_n;
  std::vector<double> serial_switch;   // per stage: a step on another chunk than the step before
                                       // finds none of its buckets resident: min_c (longest gather)
  std::vector<double> after_s;         // gradient norm + optimizer + ZeRO-1/2 parameter all-gather
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

struct CommCosts {
  std::vector<sim::CollectiveCost> dp_ag, dp_rs, dp_ar;   // one per distinct placement of the stages' groups
  // ZeRO across nodes, over a node's data-parallel ranks L (Space::node_dp): the shard group's
  // all-gather and reduce-scatter, the replicas' all-reduce and qgZ's all-to-all across nodes
  std::vector<sim::CollectiveCost> shard_ag, shard_rs, replica_ar, shard_a2a, cross_a2a;
  int64_t node_dp = 0;      // L, 0 when no variant applies
  double shard_ag_slope = 0;
  std::optional<sim::CollectiveCost> tp_ag, tp_rs, tp_ar, tied_ar;
  std::map<int64_t, CpCosts> cp;   // context parallelism, by cp (filled on first use)
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
  int64_t p2p_buffers = 0;
  bool zb = false;
};

}  // namespace detail

using detail::ChunkTimes;
using detail::PipeTerms;
using detail::CommCosts;
using detail::CpCosts;
using detail::Layout;
using detail::ZeroTerms;

namespace {

constexpr double kMargin = 1e-5;   // relative, for the simulator's per-instruction ns rounding

using detail::ns;

void fill_params(Layout& lay, const spec::Model& m, int64_t threshold) {
  const int64_t tied = program::tied_head_copy(m, lay.tp);
  lay.params.assign(static_cast<std::size_t>(lay.pp), {});
  lay.stage_params.assign(static_cast<std::size_t>(lay.pp), 0);
  lay.stage_persistent.assign(static_cast<std::size_t>(lay.pp), 0);
  for (int64_t s = 0; s < lay.pp; ++s) {
    const bool has_embedding = lay.chunk(s, 0).unit_begin == 0;
    auto& params = lay.params[static_cast<std::size_t>(s)];
    params.resize(lay.units.size());
    for (int64_t c = 0; c < lay.v; ++c) {
      ChunkInfo& ch = lay.chunks[static_cast<std::size_t>(s * lay.v + c)];
      for (int32_t u = ch.unit_begin; u < ch.unit_end; ++u) {
        params[static_cast<std::size_t>(u)] = program::unit_params(lay.units, u, has_embedding, tied, threshold);
        ch.params += params[static_cast<std::size_t>(u)].elems;
        lay.stage_persistent[static_cast<std::size_t>(s)] += params[static_cast<std::size_t>(u)].persistent;
      }
      lay.stage_params[static_cast<std::size_t>(s)] += ch.params;
    }
  }
}

// The simulator's gradient-norm all-reduce: NCCL's all-reduce of its few bytes over the world.
double gradnorm_s(const sim::Topology& topology, int64_t world) {
  if (world <= 1) return 0;
  std::vector<int64_t> all(static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
  return ns(sim::CollectiveCost(CollectiveKind::kAllReduce, all, topology).time_ns(program::kGradNormBytes));
}

// Every distinct placement the data-parallel groups of the simulated ranks (tp index 0) take.
std::vector<std::vector<int64_t>> dp_placements(const program::Placement& pl, int64_t gpn) {
  std::vector<std::vector<int64_t>> out;
  std::set<int64_t> seen;
  for (int64_t s = 0; s < pl.pp; ++s) {
    const int64_t base = pl.rank(s, 0, 0);
    if (!seen.insert(base % gpn).second) continue;
    out.push_back(pl.group_members(program::Group::kDp, base));
  }
  return out;
}

// The ZeRO variant fields of a candidate, both ways.
ZeroTerms variant_of(const Candidate& c) {
  ZeroTerms z;
  z.zero = c.zero;
  z.variant = c.zero_variant;
  z.offload = c.offload;
  z.overlap = c.overlap_comm;
  z.reduce_i = c.reduce_i;
  z.prefetch_i = c.prefetch_i;
  z.max_live_i = c.max_live_i;
  return z;
}

void set_variant(Candidate& c, const ZeroTerms& z) {
  c.zero = z.zero;
  c.zero_variant = z.variant;
  c.offload = z.offload;
  c.overlap_comm = z.overlap;
  c.reduce_i = z.reduce_i;
  c.prefetch_i = z.prefetch_i;
  c.max_live_i = z.max_live_i;
}

int64_t bucket_value(const std::vector<int64_t>& grid, int8_t i, int64_t fallback) {
  return i >= 0 ? grid[static_cast<std::size_t>(i)] : fallback;
}

// Gradient reductions of one stage: their times in total, over chunk 0 and for chunk 0's last bucket.
struct GradTerms {
  double all = 0, c0_sum = 0, c0_last = 0;
};

// `time`: a bucket's reduction time, at least (build_variant says which collective).
template <typename Time>
GradTerms grad_terms(const Layout& lay, int64_t s, const program::BucketRule& rule, const Time& time, std::vector<int64_t>& sig) {
  GradTerms g;
  const bool dpc = lay.dp > 1;
  for (int64_t c = 0; c < lay.v; ++c) {
    for (const program::Bucket& b : program::grad_buckets(lay.chunk(s, c), lay.params[static_cast<std::size_t>(s)], rule)) {
      const double t = dpc ? time(b) : 0.0;
      g.all += t;
      if (c == 0) {
        g.c0_sum += t;
        g.c0_last = t;
      }
      if (dpc) sig.push_back(b.elems);
    }
    if (dpc) sig.push_back(-1);
  }
  return g;
}

// ZeRO-3 parameter buckets of one stage, per chunk: gathered elements, bucket count, gather times.
struct GatherStats {
  double once = 0;                      // every bucket gathered once
  int64_t gathered = 0, biggest = 0, smallest = 0, second = 0;
  std::vector<int64_t> chunk_elems, chunk_buckets;
  std::vector<double> chunk_serial;     // Σ_b T_AG(b) − max_b T_AG(b)
  std::vector<double> chunk_longest;    // max_b T_AG(b)
};

// `gather_s(bytes)`: a bucket's gather time, at least; `first_s(bytes)` its first gather's in a step
// (the once-a-step term: hpZ's is over the whole group); `pbytes` the bytes of a gathered element.
template <typename Time, typename First>
GatherStats gather_stats(const Layout& lay, int64_t s, const program::BucketRule& rule, const Time& gather_s,
                         const First& first_s, int64_t pbytes, std::vector<int64_t>& sig) {
  GatherStats g;
  for (int64_t c = 0; c < lay.v; ++c) {
    int64_t elems = 0, buckets = 0;
    double pass = 0, longest = 0;
    for (const program::Bucket& b : program::param_buckets(lay.chunk(s, c), lay.params[static_cast<std::size_t>(s)], rule)) {
      if (b.elems <= 0) continue;   // all persistent: never gathered
      const double t = gather_s(b.elems * pbytes);
      pass += t;
      g.once += first_s(b.elems * pbytes);
      longest = std::max(longest, t);
      elems += b.elems;
      ++buckets;
      g.biggest = std::max(g.biggest, b.elems);
      if (g.smallest == 0 || b.elems < g.smallest) {
        g.second = g.smallest;
        g.smallest = b.elems;
      } else if (g.second == 0 || b.elems < g.second) {
        g.second = b.elems;
      }
      sig.push_back(-b.elems);
    }
    g.gathered += elems;
    g.chunk_elems.push_back(elems);
    g.chunk_buckets.push_back(buckets);
    g.chunk_serial.push_back(pass - longest);
    g.chunk_longest.push_back(longest);
  }
  return g;
}

// The ZeRO-3 regathering terms of one stage (see ZeroTerms).
void add_regathers(ZeroTerms& z, const GatherStats& g, int64_t max_live, int64_t pbytes, spec::Prefetch prefetch) {
  // Every forward and backward step of a chunk uses all its buckets, and at most
  // R = max(max_live, biggest bucket) + biggest elements stay resident from one step to the next
  // (a bucket is gathered within max_live, and one more may be prefetched on top: the
  // look-ahead checks its budget before adding), so each step gathers at least (G_chunk − R)
  // again: per micro-batch Σ_chunks 2·(G_c − R)+.
  const int64_t resident = std::max(max_live, g.biggest) + (prefetch == spec::Prefetch::kNone ? 0 : g.biggest);
  int64_t again = 0;
  for (int64_t e : g.chunk_elems) again += 2 * std::max<int64_t>(0, e - resident);
  z.regather_bytes.push_back(static_cast<double>(again * pbytes));
  // Nothing is prefetched: every bucket but (perhaps) one per pass is gathered between two
  // computes of that pass — with the look-ahead when every bucket alone fills max_live (live is
  // never below it while one is resident), and always for a synchronous framework.
  const bool lookahead_blocked = prefetch == spec::Prefetch::kLookAhead && g.smallest >= max_live;
  const bool alone = g.second > 0 && (prefetch == spec::Prefetch::kNone || lookahead_blocked);
  double serial = 0, allowance = 0;
  int64_t boundaries = 0;
  for (std::size_t c = 0; c < g.chunk_serial.size(); ++c) {
    serial += alone ? 2 * g.chunk_serial[c] : 0.0;
    boundaries += alone ? 2 * std::max<int64_t>(0, g.chunk_buckets[c] - 1) : 0;
    allowance = c == 0 ? g.chunk_longest[c] : std::min(allowance, g.chunk_longest[c]);
  }
  z.serial_g.push_back(serial);
  z.serial_n.push_back(boundaries);
  z.first_g.push_back(alone && !g.chunk_serial.empty() ? g.chunk_serial.front() : 0.0);
  z.first_n.push_back(alone && !g.chunk_buckets.empty() ? std::max<int64_t>(0, g.chunk_buckets.front() - 1) : 0);
  z.serial_switch.push_back(alone ? allowance : 0.0);
}

// After a stage's last compute: gradient norm, optimizer step, ZeRO-1/2 parameter all-gather.
double after_terms(const ZeroTerms& z, int64_t s, int64_t P, int64_t dp, const CommCosts& cc, const sim::ComputeModel& cm,
                   int64_t pbytes) {
  const bool sharded = z.variant == ZeroVariant::kShard && !cc.shard_ag.empty();
  const int64_t group = sharded ? cc.node_dp : dp;
  const int64_t shard = z.zero >= 1 ? program::shard_elems(P, group) : P;
  double after = cc.gradnorm_s;
  after += z.offload ? 2 * cm.offload_copy_s(shard * pbytes) + cm.optimizer_host_s(shard) : cm.optimizer_gpu_s(shard);
  if ((z.zero == 1 || z.zero == 2) && dp > 1) {
    for (const program::Bucket& b : program::allgather_buckets(static_cast<int32_t>(s), P, spec::ZeroConfig{}.allgather_bucket)) {
      after += sharded ? CommCosts::least_s(cc.shard_ag, b.elems * pbytes) : cc.dp_s(CollectiveKind::kAllGather, b.elems * pbytes);
    }
  }
  return after;
}

// The per-stage ZeRO terms of one variant; `sig` receives what makes its Program distinct.
// ZeRO across nodes (Space's ZeroVariant) in the bounds, each term at most what the simulator charges:
//   shard    states sharded over L: model states over L; gathers and reduce-scatters over the shard
//            group; the replicas' all-reduce of each bucket's shard on the reduce lane where the
//            framework runs it there (DeepSpeed's MiCS, Megatron-LM), not counted with FSDP (its own stream)
//   hpz      each bucket's first gather of a step over the whole group (the gather lane's once-a-step
//            term), every other gather term at the cheaper of the whole and the secondary group's
//            cost; 2·⌈P_gathered/L⌉ bytes more memory
//   zeropp   hpz's, with gathers of 1 byte an element (int8; scales not counted); a reduction at
//            least qgZ's two all-to-alls of the matrices (n/2 bytes over the node, n/(2L) across)
//            and one reduce-scatter of the rest (scales and the quantize kernels not counted)
void build_variant(ZeroTerms& z, const Layout& lay, const CommCosts& cc, const Space& space,
                   const sim::ComputeModel& cm, std::vector<int64_t>& sig) {
  const spec::Model& m = space.model();
  const spec::Dtype dtype = space.training().dtype;
  const int64_t pbytes = spec::bytes_of(spec::storage_dtype(dtype));
  const int64_t pp = lay.pp, dp = lay.dp;
  const bool dpc = dp > 1;
  const spec::ZeroConfig defaults;
  const int64_t reduce = bucket_value(space.reduce_grid(), z.reduce_i, defaults.reduce_bucket);
  spec::ZeroConfig zc;
  zc.stage = z.zero;
  zc.offload_optimizer = z.offload ? spec::Offload::kCpu : spec::Offload::kNone;
  zc.reduce_bucket = reduce;
  const int64_t prefetch = bucket_value(space.prefetch_grid(), z.prefetch_i, defaults.prefetch_bucket);
  const int64_t max_live = bucket_value(space.max_live_grid(), z.max_live_i, defaults.max_live_parameters);
  zc.prefetch_bucket = prefetch;
  const int64_t l = cc.node_dp;
  const bool across = z.variant != ZeroVariant::kPlain && l > 0;
  const bool sharded = across && z.variant == ZeroVariant::kShard;
  const bool hpz = across && (z.variant == ZeroVariant::kHpz || z.variant == ZeroVariant::kZeroPP);
  const bool zeropp = across && z.variant == ZeroVariant::kZeroPP;
  if (sharded) zc.shard_group = l;
  if (hpz) zc.hpz_group = l;
  program::BucketRule rule = program::bucket_rule(zc, space.training().framework_profile());
  if (zeropp) rule.qgz_world = dp;
  const int64_t partition = spec::partition_group(zc, dp);
  const int64_t rbytes = space.training().reduce_bytes();
  const bool tied = m.tied_embeddings && pp > 1;
  const double tied_s = tied ? ns(cc.tied_ar->time_ns(program::tied_head_copy(m, lay.tp) * rbytes)) : 0.0;
  const CollectiveKind red_kind = z.zero == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter;
  const bool replica_on_lane = sharded && !space.training().framework_profile().replica_stream;
  const auto reduce_s = [&](const program::Bucket& b) {
    if (sharded) {
      const double rs = CommCosts::least_s(cc.shard_rs, b.elems * rbytes);
      return rs + (replica_on_lane ? CommCosts::least_s(cc.replica_ar, program::shard_elems(b.elems, l) * rbytes) : 0.0);
    }
    if (zeropp) {
      const double a2a = b.qgz_matrices > 0 ? CommCosts::least_s(cc.shard_a2a, b.qgz_elems / 2) +
                                                   CommCosts::least_s(cc.cross_a2a, b.qgz_elems / (2 * l))
                                             : 0.0;
      return a2a + (b.qgz_fallbacks > 0 ? cc.dp_s(CollectiveKind::kReduceScatter, (b.elems - b.qgz_elems) * rbytes) : 0.0);
    }
    return cc.dp_s(red_kind, b.elems * rbytes);
  };
  const auto global_s = [&](int64_t bytes) { return cc.dp_s(CollectiveKind::kAllGather, bytes); };
  const auto gather_s = [&](int64_t bytes) {
    if (sharded) return CommCosts::least_s(cc.shard_ag, bytes);
    if (hpz) return std::min(global_s(bytes), CommCosts::least_s(cc.shard_ag, bytes));
    return global_s(bytes);
  };
  const int64_t gather_bytes = zeropp ? 1 : pbytes;   // qwZ: int8
  sig = {dpc ? z.zero : -1, z.offload, z.overlap, static_cast<int64_t>(across ? z.variant : ZeroVariant::kPlain)};
  z.gather_slope = sharded || hpz ? std::min(cc.dp_ag_slope, cc.shard_ag_slope) : cc.dp_ag_slope;
  int64_t max_gathered = 0;
  for (int64_t s = 0; s < pp; ++s) {
    const int64_t P = lay.stage_params[static_cast<std::size_t>(s)];
    const GradTerms g = grad_terms(lay, s, rule, reduce_s, sig);
    GatherStats gs;
    // hpZ: every bucket's first gather of the step is over the whole group
    const auto first_s = [&](int64_t bytes) { return hpz ? global_s(bytes) : gather_s(bytes); };
    if (z.zero == 3 && dpc) gs = gather_stats(lay, s, rule, gather_s, first_s, gather_bytes, sig);
    max_gathered = std::max(max_gathered, gs.gathered);
    add_regathers(z, gs, max_live, gather_bytes, space.training().framework_profile().prefetch);
    // reductions after the last compute: the last bucket, or every deferred one without overlap
    double last = dpc ? (z.overlap ? g.c0_last : (z.zero <= 1 ? g.all : g.c0_sum)) : 0.0;
    if (s == 0) last += tied_s;
    const double lane = g.all + ((s == 0 || s == pp - 1) ? tied_s : 0.0);
    const bool per_mb = z.zero >= 2 && dpc;
    const int64_t persistent = z.zero == 3 && dpc ? lay.stage_persistent[static_cast<std::size_t>(s)] : 0;
    z.static_bytes.push_back(sim::model_states(P, persistent, zc, partition, dtype).total() +
                             sim::grad_bucket_buffer_bytes(zc, dp, P, pbytes) +
                             sim::hpz_secondary_bytes(P - persistent, zc, dp, pbytes));
    z.last_reduce_s.push_back(last);
    z.once_s.push_back(per_mb ? 0.0 : lane);
    z.per_mb_s.push_back(per_mb ? lane : 0.0);
    z.gather_s.push_back(gs.once);
    z.after_s.push_back(after_terms(z, s, P, dp, cc, cm, pbytes));
    if (z.zero >= 2 && dpc) sig.push_back(std::min(reduce, P));
  }
  if (z.zero == 3 && dpc) sig.push_back(std::min(max_live, max_gathered));
}

void build_variants(Layout& lay, const CommCosts& cc, const Space& space, const sim::ComputeModel& cm) {
  std::set<std::vector<int64_t>> seen;
  std::map<std::tuple<int, int, bool, int, int, int>, int32_t> without_offload;
  auto add = [&](ZeroTerms z) {
    std::vector<int64_t> sig;
    build_variant(z, lay, cc, space, cm, sig);
    z.duplicate = !seen.insert(sig).second;
    const auto key = std::make_tuple(int{z.zero}, static_cast<int>(z.variant), z.overlap, int{z.reduce_i}, int{z.prefetch_i},
                                     int{z.max_live_i});
    if (!z.offload) {
      without_offload[key] = static_cast<int32_t>(lay.variants.size());
    } else if (auto it = without_offload.find(key); it != without_offload.end()) {
      z.twin = it->second;
    }
    lay.variants.push_back(std::move(z));
  };
  const bool dpc = lay.dp > 1;
  const int8_t nr = static_cast<int8_t>(space.reduce_grid().size());
  const int8_t np = static_cast<int8_t>(space.prefetch_grid().size());
  const int8_t nl = static_cast<int8_t>(space.max_live_grid().size());
  const bool deepspeed = space.training().framework == spec::Framework::kDeepSpeed;
  // every bucket grid value the variant's stage uses (none without data parallelism)
  const auto add_buckets = [&](ZeroTerms z) {
    if (!dpc) return add(z);
    for (int8_t r = 0; r < nr; ++r) {
      z.reduce_i = r;
      if (z.zero != 3) {
        add(z);
        continue;
      }
      for (int8_t p = 0; p < np; ++p) {
        for (int8_t l = 0; l < nl; ++l) {
          z.prefetch_i = p;
          z.max_live_i = l;
          add(z);
        }
      }
    }
  };
  for (int zero : space.zero_values()) {
    for (ZeroVariant variant : space.zero_variants(zero, lay.tp, lay.dp)) {
      for (bool overlap : space.overlap_values()) {
        for (bool offload : space.offload_values()) {
          if (offload && zero == 0) continue;   // optimizer offload needs ZeRO >= 1
          if (offload && deepspeed && variant == ZeroVariant::kShard) continue;   // MiCS has no CPU offload
          ZeroTerms z;
          z.zero = static_cast<int8_t>(zero);
          z.variant = variant;
          z.overlap = overlap;
          z.offload = offload;
          add_buckets(z);
        }
      }
    }
  }
}

// The tensor-parallel collective times of one micro-batch's passes, per unit kind, where the
// lowering puts them (program::tp_collectives).
struct TpOps {
  bool any = false, sp = false;
  double ag = 0;                           // the all-gather of a received message (scatter-gather)
  std::array<double, 4> fwd_s{}, bwd_s{};  // by UnitKind: a forward (recompute) / backward pass's collectives
  std::array<double, 4> fwd_before{}, bwd_before{};  // by UnitKind: those before the pass's compute
  double max_s = 0;                        // the longest single collective
  double max_op() const { return max_s; }
  double fwd(UnitKind k) const { return fwd_s[static_cast<std::size_t>(k)]; }
  double bwd(UnitKind k) const { return bwd_s[static_cast<std::size_t>(k)]; }
};

// The context-parallel collectives of one attention unit's passes, where the lowering puts them
// (program::cp_collectives): the blocking ones (before and after the unit) and the p2p ring's
// (beside it: what follows waits for the longer of the ring and the unit's compute).
struct CpOps {
  bool any = false;
  double fwd_block = 0, bwd_block = 0;   // all_gather, a2a
  double fwd_before = 0, bwd_before = 0; // the blocking ones before the unit's compute
  double fwd_ring = 0, bwd_ring = 0;     // p2p
  double max_s = 0;                      // the longest single collective
};

ChunkTimes chunk_times(const Layout& lay, const ChunkInfo& ch, const sim::ComputeModel& cm, const TpOps& tp, const CpOps& cp,
                       const spec::Plan& plan, const Space& space, bool zb) {
  const spec::Model& m = space.model();
  const int32_t head = program::head_unit(m);
  const bool full = plan.recompute == spec::Recompute::kFull;
  ChunkTimes t;
  const double F = cm.compute_s(Op::kForward, ch.unit_begin, ch.unit_end);
  const double B = cm.compute_s(Op::kBackward, ch.unit_begin, ch.unit_end);
  const double Bi = cm.compute_s(Op::kBackwardInput, ch.unit_begin, ch.unit_end);
  const int32_t rb = std::max(ch.unit_begin, 1), re = std::min(ch.unit_end, head);
  const double R = full && rb < re ? cm.compute_s(Op::kRecompute, rb, re) : 0.0;
  double tf = 0, tb = 0, act = 0;
  for (int32_t u = ch.unit_begin; u < ch.unit_end; ++u) {
    const Unit& unit = lay.units[static_cast<std::size_t>(u)];
    tf += tp.fwd(unit.kind);
    tb += tp.bwd(unit.kind);
    if (full && u >= rb && u < re) tb += tp.fwd(unit.kind);
    if (cp.any && unit.kind == UnitKind::kAttention) {
      // the ring beside the unit's pass: what follows waits max(ring, compute)
      const auto beyond = [&](double ring, Op op) { return ring > 0 ? std::max(0.0, ring - cm.compute_s(op, u, u + 1)) : 0.0; };
      tf += cp.fwd_block + beyond(cp.fwd_ring, Op::kForward);
      tb += cp.bwd_block + beyond(cp.bwd_ring, zb ? Op::kBackwardInput : Op::kBackward);
      if (full && u >= rb && u < re) tb += cp.fwd_block + beyond(cp.fwd_ring, Op::kRecompute);
    }
    act += sim::activation_bytes_per_token(unit, m, plan, space.training(), plan.recompute);
  }
  const double tokens = static_cast<double>(spec::rank_tokens(plan, m.seq_len));
  // The simulator rounds each Forward's bytes down to a whole byte, and a chunk's forward is at
  // most one instruction per unit: at most (units) bytes below the exact sum.
  t.act_bytes = std::max(0.0, tokens * act - static_cast<double>(ch.unit_end - ch.unit_begin));
  t.fwd_chain = F + tf;
  t.bwd_chain = (zb ? Bi : B) + R + tb;
  // Megatron's scatter-gather: without sp, a received activation (or gradient) is all-gathered
  // over tp before the compute that needs it.
  const bool gather_recv = tp.any && program::gathers_received_message(plan.tp, tp.sp);
  if (gather_recv && lay.has_prev(ch)) tf += tp.ag;
  if (gather_recv && lay.has_next(ch)) tb += tp.ag;
  {
    const Unit& first = lay.units[static_cast<std::size_t>(ch.unit_begin)];
    const Unit& last = lay.units[static_cast<std::size_t>(ch.unit_end - 1)];
    const bool attn_first = cp.any && first.kind == UnitKind::kAttention, attn_last = cp.any && last.kind == UnitKind::kAttention;
    t.pre_fwd = (tp.any ? tp.fwd_before[static_cast<std::size_t>(first.kind)] : 0.0) + (attn_first ? cp.fwd_before : 0.0) +
                (gather_recv && lay.has_prev(ch) ? tp.ag : 0.0);
    t.pre_bwd = (tp.any ? tp.bwd_before[static_cast<std::size_t>(last.kind)] : 0.0) + (attn_last ? cp.bwd_before : 0.0) +
                (gather_recv && lay.has_next(ch) ? tp.ag : 0.0);
  }
  const double op = std::max(tp.max_op(), cp.max_s);
  t.busy = F + B + R + std::max(0.0, tf - op) + std::max(0.0, tb - op);
  t.sends = (lay.has_next(ch) ? 1 : 0) + (lay.has_prev(ch) ? 1 : 0);
  return t;
}

// Activation bytes stage s holds when its last warm-up forward starts (the schedule's own count).
double held_activations(const Layout& lay, const std::vector<ChunkTimes>& times, int64_t s, spec::Schedule sched,
                        int64_t m) {
  const std::vector<int64_t> sets = program::warmup_held_sets(sched, lay.pp, m, lay.v, s);
  double bytes = 0;
  for (int64_t c = 0; c < lay.v; ++c) {
    bytes += static_cast<double>(sets[static_cast<std::size_t>(c)]) * times[static_cast<std::size_t>(s * lay.v + c)].act_bytes;
  }
  return bytes;
}

}  // namespace

struct Pruner::ComputeEntry {
  spec::Plan plan;
  std::optional<sim::ComputeModel> model;
};

std::vector<Group> groups(const Space& space) {
  std::vector<Group> out;
  for (int64_t tp : space.tp_values()) {
    for (int64_t pp : space.pp_values(tp)) {   // (tp, pp)-major: the pruner keeps one pair's layouts
      for (int64_t cp : space.cp_values(tp, pp)) {
        for (spec::CpComm comm : space.cp_comms(tp, cp)) {
          for (int64_t mb : space.micro_batch_values(space.gpus() / (tp * pp * cp))) out.push_back({tp, pp, mb, cp, comm});
        }
      }
    }
  }
  return out;
}

Pruner::Pruner(const Space& space) : space_(space), topology_(space.cluster(), space.gpus()) {}
Pruner::~Pruner() = default;

const sim::ComputeModel& Pruner::compute(int64_t tp, bool sp, spec::Recompute rc, int64_t mb, int64_t cp, spec::CpComm comm) {
  const auto key = std::make_tuple(tp, sp, static_cast<int>(rc), mb, cp, static_cast<int>(comm));
  auto it = computes_.find(key);
  if (it != computes_.end()) return *it->second->model;
  auto entry = std::make_unique<ComputeEntry>();
  entry->plan.tp = tp;
  entry->plan.sequence_parallel = sp;
  entry->plan.recompute = rc;
  entry->plan.micro_batch = mb;
  entry->plan.cp = cp;
  entry->plan.cp_comm = comm;
  entry->model.emplace(space_.model(), space_.cluster(), space_.training(), entry->plan);
  return *computes_.emplace(key, std::move(entry)).first->second->model;
}

CommCosts& Pruner::comm(int64_t tp, int64_t pp) {
  const auto key = std::make_pair(tp, pp);
  auto it = comms_.find(key);
  if (it != comms_.end()) return *it->second;
  auto cc = std::make_unique<CommCosts>();
  const program::Placement pl{tp, pp, space_.gpus() / (tp * pp)};
  const int64_t gpn = space_.cluster().gpus_per_node;
  for (const std::vector<int64_t>& g : dp_placements(pl, gpn)) {
    cc->dp_ag.emplace_back(CollectiveKind::kAllGather, g, topology_);
    cc->dp_rs.emplace_back(CollectiveKind::kReduceScatter, g, topology_);
    cc->dp_ar.emplace_back(CollectiveKind::kAllReduce, g, topology_);
  }
  // ZeRO across nodes: the groups over a node's L data-parallel ranks, on every stage's placement
  if (const int64_t l = space_.node_dp(tp, pl.dp); l > 0) {
    program::Placement sub = pl;
    sub.inner = l;
    sub.local = l;
    cc->node_dp = l;
    std::set<int64_t> seen;
    for (int64_t s = 0; s < pp; ++s) {
      const int64_t base = pl.rank(s, 0, 0);
      if (!seen.insert(base % gpn).second) continue;
      const std::vector<int64_t> shard = sub.group_members(program::Group::kDpShard, base);
      cc->shard_ag.emplace_back(CollectiveKind::kAllGather, shard, topology_);
      cc->shard_rs.emplace_back(CollectiveKind::kReduceScatter, shard, topology_);
      const std::vector<int64_t> replicas = sub.group_members(program::Group::kDpReplica, base);
      cc->replica_ar.emplace_back(CollectiveKind::kAllReduce, replicas, topology_);
      cc->shard_a2a.emplace_back(CollectiveKind::kAllToAll, shard, topology_);
      cc->cross_a2a.emplace_back(CollectiveKind::kAllToAll, sub.group_members(program::Group::kDpCross, base), topology_);
    }
  }
  const std::vector<int64_t> tpg = pl.group_members(program::Group::kTp, 0);
  cc->tp_ag.emplace(CollectiveKind::kAllGather, tpg, topology_);
  cc->tp_rs.emplace(CollectiveKind::kReduceScatter, tpg, topology_);
  cc->tp_ar.emplace(CollectiveKind::kAllReduce, tpg, topology_);
  if (pp > 1) {
    cc->tied_ar.emplace(CollectiveKind::kAllReduce, pl.group_members(program::Group::kEmbedding, 0), topology_);
    for (int64_t s = 0; s + 1 < pp; ++s) {
      const std::vector<int64_t> pair = {pl.rank(s, 0, 0), pl.rank(s + 1, 0, 0)};
      cc->p2p.emplace_back(CollectiveKind::kSendRecv, pair, topology_);
    }
    const std::vector<int64_t> wrap = {pl.rank(pp - 1, 0, 0), pl.rank(0, 0, 0)};
    cc->p2p.emplace_back(CollectiveKind::kSendRecv, wrap, topology_);
  }
  cc->gradnorm_s = gradnorm_s(topology_, space_.gpus());
  cc->set_slope();
  return *comms_.emplace(key, std::move(cc)).first->second;
}

const Layout& Pruner::layout(int64_t tp, int64_t pp, int64_t v, Split split) {
  const auto key = std::make_tuple(tp, pp, v, static_cast<int>(split));
  auto it = layouts_.find(key);
  if (it != layouts_.end()) return *it->second;
  if (!layouts_.empty() && (std::get<0>(layouts_.begin()->first) != tp || std::get<1>(layouts_.begin()->first) != pp)) {
    layouts_.clear();   // groups come (tp, pp)-major: keep one pair's layouts only
    comms_.clear();
  }
  const spec::Model& m = space_.model();
  auto lay = std::make_unique<Layout>();
  lay->tp = tp;
  lay->pp = pp;
  lay->v = v;
  lay->dp = space_.gpus() / (tp * pp);
  lay->split = split;
  lay->units = program::model_units(m, tp);
  spec::Plan p;
  p.tp = tp;
  p.pp = pp;
  p.virtual_stages = v;
  if (split == Split::kUniform) {
    for (int64_t s = 0; s < pp; ++s) p.stage_layers.push_back(m.layers / pp + (s < m.layers % pp ? 1 : 0));
  }
  lay->chunk_layers = program::chunk_layers(m, p, lay->units);
  if (split == Split::kUniform) lay->duplicate = layout(tp, pp, v, Split::kBalanced).chunk_layers == lay->chunk_layers;
  lay->stage_layers = program::stage_layers_of(lay->chunk_layers, pp);
  lay->chunks = program::place_chunks(m, pp, v, lay->chunk_layers);
  spec::ZeroConfig z3;
  z3.stage = 3;  // the ZeRO-3 variants' threshold (the others gather nothing)
  fill_params(*lay, m, program::persistence_threshold(z3, space_.training().framework_profile()));
  build_variants(*lay, comm(tp, pp), space_, compute(tp, false, spec::Recompute::kNone, 1));
  return *layouts_.emplace(key, std::move(lay)).first->second;
}

const std::vector<int64_t>& Pruner::switches(int64_t p, int64_t m, int64_t v) {
  const auto key = std::make_tuple(p, m, v);
  auto it = switches_.find(key);
  if (it != switches_.end()) return it->second;
  std::vector<int64_t> out;
  for (int64_t s = 0; s < p; ++s) {
    int64_t n = 0, last = -1;
    for (const program::Step& step : program::interleaved_steps(p, m, v, s)) {
      if (last >= 0 && step.chunk != last) ++n;
      last = step.chunk;
    }
    out.push_back(n);
  }
  return switches_.emplace(key, std::move(out)).first->second;
}


namespace {

PipeTerms pipe_terms(const Layout& lay, const std::vector<ChunkTimes>& times, const CommCosts& cc,
                     spec::Schedule sched, int64_t m, int64_t p2p_bytes, const std::vector<int64_t>& switches) {
  const int64_t p = lay.pp, v = lay.v;
  PipeTerms t;
  t.switches = switches;
  t.switches.resize(static_cast<std::size_t>(p), 0);
  t.zb = sched == spec::Schedule::kZbH1;
  t.head.assign(static_cast<std::size_t>(p), 0);
  t.tail.assign(static_cast<std::size_t>(p), 0);
  for (int64_t s = 1; s < p; ++s) {
    const double link = ns(cc.p2p[static_cast<std::size_t>(s - 1)].time_ns(p2p_bytes));
    const ChunkTimes& prev = times[static_cast<std::size_t>((s - 1) * v)];
    t.head[static_cast<std::size_t>(s)] = t.head[static_cast<std::size_t>(s - 1)] + prev.fwd_chain + link;
    t.tail[static_cast<std::size_t>(s)] = t.tail[static_cast<std::size_t>(s - 1)] + prev.bwd_chain + link;
  }
  // Without overlap_p2p (the plans' default), a stage computes on only once its previous send
  // has arrived: every send but the step's last is on the stage's critical path.
  double link = 0;
  for (std::size_t i = 0; i < cc.p2p.size(); ++i) {
    const double t_i = ns(cc.p2p[i].time_ns(p2p_bytes));
    link = i == 0 ? t_i : std::min(link, t_i);
  }
  t.link = p > 1 ? link : 0.0;
  const bool blocking = !spec::Plan{}.overlap_p2p;
  for (int64_t s = 0; s < p; ++s) {
    double busy = 0, hidden = 0;
    int64_t sends = 0;
    for (int64_t c = 0; c < v; ++c) {
      const ChunkTimes& ct = times[static_cast<std::size_t>(s * v + c)];
      busy += ct.busy;
      sends += ct.sends;
      hidden += std::min(link, ct.pre_fwd) + std::min(link, ct.pre_bwd);
    }
    double total = static_cast<double>(m) * busy;
    // a blocking send holds the next compute, not the collectives before it: they may hide it
    if (blocking && p > 1) {
      total += std::max(0.0, static_cast<double>(std::max<int64_t>(0, m * sends - 1)) * link - static_cast<double>(m) * hidden);
    }
    t.busy.push_back(total);
    t.first_fwd.push_back(times[static_cast<std::size_t>(s * v)].fwd_chain);
    t.held.push_back(held_activations(lay, times, s, sched, m));
  }
  t.p2p_buffers = sim::p2p_buffer_bytes(p2p_bytes, p);
  return t;
}

Estimate combine(const PipeTerms& pipe, const ZeroTerms& z, int64_t m, int64_t reserved) {
  Estimate e;
  const std::size_t p = pipe.busy.size();
  double lb = 0;
  const double dp_tail_0 = z.last_reduce_s[0] + z.after_s[0];
  double before = 0;   // ZeRO-3 serial gathers on the earlier stages' first forward
  for (std::size_t s = 0; s < p; ++s) {
    const double dp_tail = z.last_reduce_s[s] + z.after_s[s];
    const double serial = std::max(0.0, z.serial_g[s] - static_cast<double>(z.serial_n[s]) * pipe.tp_gap);
    const double switched = std::max(0.0, z.serial_switch[s] - pipe.step_gap);
    const double run = pipe.head[s] + before + pipe.busy[s] + static_cast<double>(m) * serial +
                       static_cast<double>(pipe.switches[s]) * switched;
    lb = std::max(lb, run + dp_tail);
    if (!pipe.zb) lb = std::max(lb, run + pipe.tail[s] + before + dp_tail_0);
    before += std::max(0.0, z.first_g[s] - static_cast<double>(z.first_n[s]) * pipe.tp_gap);
    lb = std::max(lb, pipe.head[s] + pipe.first_fwd[s] + z.once_s[s] + static_cast<double>(m) * z.per_mb_s[s] + z.after_s[s]);
    lb = std::max(lb, std::max(z.gather_s[s], z.gather_slope * static_cast<double>(m) * z.regather_bytes[s]));
    const int64_t mem = z.static_bytes[s] + reserved + pipe.p2p_buffers + static_cast<int64_t>(pipe.held[s]);
    e.memory_lb_bytes = std::max(e.memory_lb_bytes, mem);
  }
  e.step_time_lb_s = lb * (1 - kMargin);
  return e;
}

// `overlap`: TP communication overlap, the simulator's rule (sim/models/tp_overlap.hpp).
TpOps tp_ops(const CommCosts& cc, int64_t tp, bool sp, int64_t tokens, int64_t hidden, int64_t abytes,
             const sim::TpOverlap& overlap) {
  TpOps ops;
  if (tp <= 1) return ops;
  ops.any = true;
  ops.sp = sp;
  auto time = [&](const program::TpCollective& c, UnitKind kind, bool backward) {
    const sim::CollectiveCost& cost = c.op == Op::kTpAllGather ? *cc.tp_ag : c.op == Op::kTpReduceScatter ? *cc.tp_rs : *cc.tp_ar;
    const double t = sim::tp_overlapped_s(overlap, kind, c.op, backward, ns(cost.time_ns(c.bytes)));
    ops.max_s = std::max(ops.max_s, t);
    return t;
  };
  ops.ag = time({Op::kTpAllGather, program::tp_collective_bytes(tokens, hidden, abytes)}, UnitKind::kEmbedding, false);
  for (UnitKind kind : {UnitKind::kEmbedding, UnitKind::kAttention, UnitKind::kMlp, UnitKind::kHead}) {
    for (Op pass : {Op::kForward, Op::kBackward}) {
      const program::TpAround around = program::tp_collectives(kind, pass, sp, tokens, hidden, abytes);
      double total = 0;
      if (around.before) {
        total += time(*around.before, kind, pass == Op::kBackward);
        (pass == Op::kForward ? ops.fwd_before : ops.bwd_before)[static_cast<std::size_t>(kind)] = total;
      }
      if (around.after) total += time(*around.after, kind, pass == Op::kBackward);
      (pass == Op::kForward ? ops.fwd_s : ops.bwd_s)[static_cast<std::size_t>(kind)] = total;
    }
  }
  return ops;
}

// The cp collectives' times of one attention unit's passes (program::cp_collectives), each the
// least over the cp groups' placements.
CpOps cp_ops(const CpCosts& costs, spec::CpComm comm, int64_t cp, int64_t tokens, const program::CpShapes& shapes) {
  CpOps ops;
  if (cp <= 1) return ops;
  ops.any = true;
  auto time = [&](const program::CpCollective& c) {
    const std::vector<sim::CollectiveCost>& list = c.op == Op::kCpAllGather ? costs.ag : c.op == Op::kCpReduceScatter ? costs.rs : costs.a2a;
    const double t = CommCosts::least_s(list, c.bytes);
    ops.max_s = std::max(ops.max_s, t);
    return t;
  };
  for (Op pass : {Op::kForward, Op::kBackward}) {
    const program::CpAround around = program::cp_collectives(UnitKind::kAttention, pass, comm, cp, tokens, shapes);
    double block = 0, ring = 0;
    for (const program::CpCollective& c : around.before) block += time(c);
    (pass == Op::kForward ? ops.fwd_before : ops.bwd_before) = block;
    for (const program::CpCollective& c : around.after) block += time(c);
    for (const program::CpCollective& c : around.beside) ring += time(c);
    (pass == Op::kForward ? ops.fwd_block : ops.bwd_block) = block;
    (pass == Op::kForward ? ops.fwd_ring : ops.bwd_ring) = ring;
  }
  return ops;
}

}  // namespace

const CpCosts& Pruner::cp_costs(int64_t tp, int64_t pp, int64_t cp) {
  CommCosts& cc = comm(tp, pp);
  auto it = cc.cp.find(cp);
  if (it != cc.cp.end()) return it->second;
  CpCosts costs;
  // the cp groups of every simulated rank (tp index 0, every stage and replica), one per distinct
  // offset within a node
  program::Placement pl{tp, pp, space_.gpus() / (tp * pp)};
  pl.cp = cp;
  const int64_t gpn = space_.cluster().gpus_per_node;
  std::set<int64_t> seen;
  for (int64_t s = 0; s < pp; ++s) {
    for (int64_t d = 0; d < pl.dp; d += cp) {
      const int64_t base = pl.rank(s, d, 0);
      if (!seen.insert(base % gpn).second) continue;
      const std::vector<int64_t> g = pl.group_members(program::Group::kCp, base);
      costs.ag.emplace_back(CollectiveKind::kAllGather, g, topology_);
      costs.rs.emplace_back(CollectiveKind::kReduceScatter, g, topology_);
      costs.a2a.emplace_back(CollectiveKind::kAllToAll, g, topology_);
    }
  }
  return cc.cp.emplace(cp, std::move(costs)).first->second;
}

PipeTerms Pruner::pipe(const Layout& lay, int64_t mb, bool sp, spec::Recompute rc, spec::Schedule schedule, int64_t cp,
                       spec::CpComm cp_comm) {
  const spec::Model& m = space_.model();
  const int64_t micro_batches = space_.training().global_batch / (lay.dp / cp * mb);
  spec::Plan plan;
  plan.tp = lay.tp;
  plan.sequence_parallel = sp;
  plan.recompute = rc;
  plan.micro_batch = mb;
  plan.cp = cp;
  plan.cp_comm = cp_comm;
  const int64_t tokens = spec::rank_tokens(plan, m.seq_len);
  const int64_t abytes = spec::bytes_of(spec::storage_dtype(space_.training().dtype));
  const CommCosts& cc = comm(lay.tp, lay.pp);
  const sim::ComputeModel& cm = compute(lay.tp, sp, rc, mb, cp, cp_comm);
  const TpOps ops = tp_ops(cc, lay.tp, sp, tokens, m.hidden, abytes, cm.tp_overlap());
  const CpOps cps = cp > 1 ? cp_ops(cp_costs(lay.tp, lay.pp, cp), cp_comm, cp, tokens, program::cp_shapes(m, lay.tp, abytes)) : CpOps{};
  std::vector<ChunkTimes> times;
  times.reserve(lay.chunks.size());
  for (const ChunkInfo& ch : lay.chunks) {
    times.push_back(chunk_times(lay, ch, cm, ops, cps, plan, space_, schedule == spec::Schedule::kZbH1));
  }
  static const std::vector<int64_t> none;
  const std::vector<int64_t>& sw = schedule == spec::Schedule::kInterleaved ? switches(lay.pp, micro_batches, lay.v) : none;
  PipeTerms t = pipe_terms(lay, times, cc, schedule, micro_batches, program::p2p_message_bytes(tokens, m.hidden, lay.tp, abytes), sw);
  // what a ZeRO-3 gather may overlap between two computes: tp collectives, and with cp its
  // blocking collectives and the ring's excess
  t.tp_gap = (ops.any ? 2 * ops.max_op() : 0.0) + (cps.any ? 2 * cps.max_s + std::max(cps.fwd_ring, cps.bwd_ring) : 0.0);
  t.step_gap = t.tp_gap + t.link + (ops.any ? ops.ag : 0.0);
  return t;
}

void Pruner::enumerate_layout(const Group& g, const Layout& lay, int64_t v, spec::Schedule schedule,
                              const Visitor& visit) {
  const int64_t micro_batches = space_.training().global_batch / (lay.dp / g.cp * g.micro_batch);
  const int64_t capacity = space_.cluster().gpu.memory_bytes;
  const int64_t reserved = space_.cluster().gpu.reserved_bytes;
  Candidate c;
  c.tp = static_cast<int32_t>(g.tp);
  c.pp = static_cast<int32_t>(g.pp);
  c.dp = static_cast<int32_t>(lay.dp / g.cp);
  c.cp = static_cast<int16_t>(g.cp);
  c.cp_comm = g.cp_comm;
  c.micro_batch = static_cast<int32_t>(g.micro_batch);
  c.micro_batches = static_cast<int32_t>(micro_batches);
  c.virtual_stages = static_cast<int16_t>(v);
  c.schedule = schedule;
  c.split = lay.split;
  for (bool sp : space_.sequence_parallel_values(g.tp, g.cp)) {
    for (spec::Recompute rc : space_.recompute_values()) {
      const PipeTerms terms = pipe(lay, g.micro_batch, sp, rc, schedule, g.cp, g.cp_comm);
      c.sequence_parallel = sp;
      c.recompute = rc;
      for (const ZeroTerms& z : lay.variants) {
        if (g.cp > 1 && z.variant != ZeroVariant::kPlain) continue;   // not with cp (spec::validate_plan)
        set_variant(c, z);
        const Estimate e = combine(terms, z, micro_batches, reserved);
        Verdict verdict = Verdict::kKeep;
        if (lay.duplicate || z.duplicate) {
          verdict = Verdict::kDominated;
        } else if (z.twin >= 0 &&
                   combine(terms, lay.variants[static_cast<std::size_t>(z.twin)], micro_batches, reserved)
                           .memory_lb_bytes <= capacity) {
          verdict = Verdict::kDominated;   // offload only where the plan without it cannot fit
        } else if (e.memory_lb_bytes > capacity) {
          verdict = Verdict::kMemory;
        }
        visit(c, verdict, e);
      }
    }
  }
}

void Pruner::enumerate(const Group& g, const Visitor& visit) {
  const int64_t dp = space_.gpus() / (g.tp * g.pp * g.cp);
  const int64_t micro_batches = space_.training().global_batch / (dp * g.micro_batch);
  for (Split split : space_.split_values(g.pp)) {
    for (spec::Schedule s : space_.schedules(g.pp)) {
      enumerate_layout(g, layout(g.tp, g.pp, 1, split), 1, s, visit);
    }
    for (int64_t v : space_.virtual_stage_values(g.pp, micro_batches)) {
      enumerate_layout(g, layout(g.tp, g.pp, v, split), v, spec::Schedule::kInterleaved, visit);
    }
  }
}

Estimate Pruner::estimate(const Candidate& c) {
  const Layout& lay = layout(c.tp, c.pp, c.virtual_stages, c.split);
  ZeroTerms z = variant_of(c);
  std::vector<int64_t> sig;
  build_variant(z, lay, comm(c.tp, c.pp), space_, compute(c.tp, false, spec::Recompute::kNone, 1), sig);
  const int64_t micro_batches = space_.training().global_batch / (lay.dp / c.cp * c.micro_batch);
  return combine(pipe(lay, c.micro_batch, c.sequence_parallel, c.recompute, c.schedule, c.cp, c.cp_comm), z, micro_batches,
                 space_.cluster().gpu.reserved_bytes);
}

}  // namespace stagecraft::planner
