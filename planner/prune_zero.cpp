// Each ZeRO variant's per-stage terms of the pruning bounds (prune.hpp: model states, the
// gradient bucket, the reduce and gather lanes, ZeRO-3's serial gathers, the step's tail), and the
// variants a layout takes.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/program/zero.hpp"
#include "planner/prune_detail.hpp"
#include "sim/costs.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::planner::detail {

using program::Op;
using program::UnitKind;

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

namespace {

int64_t bucket_value(const std::vector<int64_t>& grid, int8_t i, int64_t fallback) {
  return i >= 0 ? grid[static_cast<std::size_t>(i)] : fallback;
}

// Gradient reductions of one stage: their times in total, over chunk 0 and for chunk 0's last
// bucket, and those of the buckets holding an embedding table tied over stages (reduced once a
// step, after the table's sum over the embedding group: program/emit.cpp grads_ready).
struct GradTerms {
  double all = 0, c0_sum = 0, c0_last = 0, tied = 0;
};

// `time`: a bucket's reduction time, at least (build_variant says which collective).
template <typename Time>
GradTerms grad_terms(const spec::Model& m, const Layout& lay, int64_t s, const program::BucketRule& rule, const Time& time,
                     std::vector<int64_t>& sig) {
  GradTerms g;
  const bool dpc = lay.dp > 1;
  for (int64_t c = 0; c < lay.v; ++c) {
    for (const program::Bucket& b : program::grad_buckets(lay.chunk(s, c), lay.params[static_cast<std::size_t>(s)], rule)) {
      const double t = dpc ? time(b) : 0.0;
      g.all += t;
      if (program::holds_tied_table(m, lay.pp, b)) g.tied += t;
      if (c == 0) {
        g.c0_sum += t;
        g.c0_last = t;
      }
      // what the lowering's reductions depend on: the bucket's units, its elements, its
      // collectives (DeepSpeed's IPG flushes follow the reduce bucket even where the units do not)
      if (dpc) sig.insert(sig.end(), {b.unit_begin, b.elems, b.collectives});
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
  std::vector<double> chunk_first;      // the same over each bucket's first gather of a step (hpZ: the whole group)
};

// `gather_s(bucket)`: a bucket's gather time, at least; `first_s(bucket)` its first gather's in a
// step (the once-a-step term: hpZ's is over the whole group).
template <typename Time, typename First>
GatherStats gather_stats(const Layout& lay, int64_t s, const program::BucketRule& rule, const Time& gather_s,
                         const First& first_s, std::vector<int64_t>& sig) {
  GatherStats g;
  for (int64_t c = 0; c < lay.v; ++c) {
    int64_t elems = 0, buckets = 0;
    double pass = 0, longest = 0, first = 0, first_longest = 0;
    for (const program::Bucket& b : program::param_buckets(lay.chunk(s, c), lay.params[static_cast<std::size_t>(s)], rule)) {
      if (b.elems <= 0) continue;   // all persistent: never gathered
      const double t = gather_s(b), t1 = first_s(b);
      pass += t;
      g.once += t1;
      first += t1;
      longest = std::max(longest, t);
      first_longest = std::max(first_longest, t1);
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
    g.chunk_first.push_back(first - first_longest);
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
  // The step's first forward of each chunk gathers every bucket for the first time (hpZ: over the
  // whole group, not the secondary partition): what that pass's serial gathers take beyond the others'.
  double serial = 0, allowance = 0, first_extra = 0;
  int64_t boundaries = 0;
  for (std::size_t c = 0; c < g.chunk_serial.size(); ++c) {
    serial += alone ? 2 * g.chunk_serial[c] : 0.0;
    first_extra += alone ? std::max(0.0, g.chunk_first[c] - g.chunk_serial[c]) : 0.0;
    boundaries += alone ? 2 * std::max<int64_t>(0, g.chunk_buckets[c] - 1) : 0;
    allowance = c == 0 ? g.chunk_longest[c] : std::min(allowance, g.chunk_longest[c]);
  }
  z.serial_g.push_back(serial);
  z.serial_n.push_back(boundaries);
  z.first_extra.push_back(first_extra);
  z.first_g.push_back(alone && !g.chunk_first.empty() ? g.chunk_first.front() : 0.0);
  z.again_g.push_back(alone && !g.chunk_serial.empty() ? g.chunk_serial.front() : 0.0);
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

// A data-parallel bucket collective as the simulator times it (sim/costs.hpp CostCache): its k
// pieces of ⌈S/k⌉ at the collective model's least cost over the group's placements, plus the
// framework's copies and host work around them (sim::framework_work, the simulator's own).
double bucket_s(const std::vector<sim::CollectiveCost>& list, const sim::BucketCollective& c, int64_t group,
                const spec::FrameworkProfile& framework, const spec::Cluster& cluster) {
  const sim::FrameworkWork w = sim::framework_work(framework, c, group);
  return static_cast<double>(w.pieces) * CommCosts::least_s(list, program::collective_piece(c.bytes, w.pieces)) +
         w.extra_s(cluster.gpu.hbm_Bps * cluster.gpu.memory_efficiency, cluster.host.pcie_Bps);
}

}  // namespace

// What build_variant finds per stage that only a few of a variant's fields decide, kept over
// one layout's variants: the reductions' terms by (stage, reduce bucket, prefetch bucket, ZeRO
// stage, variant), the gathers' by (stage, prefetch bucket, variant), each with its signature part.
struct VariantMemo {
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, std::pair<GradTerms, std::vector<int64_t>>> grads;
  std::map<std::tuple<int64_t, int64_t, int>, std::pair<GatherStats, std::vector<int64_t>>> gathers;
};

// The per-stage ZeRO terms of one variant; `sig` receives what makes its Program's instructions
// distinct (with z.static_bytes, the Program: build_variants).
// ZeRO across nodes (Space's ZeroVariant) in the bounds, each term at most what the simulator charges:
//   shard    states sharded over L: model states over L; gathers and reduce-scatters over the shard
//            group; the replicas' all-reduce of each bucket's shard on the reduce lane where the
//            framework runs it there (DeepSpeed's MiCS, Megatron-LM), after each reduce-scatter or
//            once a step as spec::replica_sync says; not counted with FSDP (its own stream)
//   hpz      each bucket's first gather of a step over the whole group (the gather lane's once-a-step
//            term), every other gather term at the cheaper of the whole and the secondary group's
//            cost; 2·⌈P_gathered/L⌉ bytes more memory
//   zeropp   hpz's, with gathers of 1 byte an element (int8; scales not counted); a reduction at
//            least qgZ's two all-to-alls of the matrices (n/2 bytes over the node, n/(2L) across)
//            and one reduce-scatter of the rest (scales and the quantize kernels not counted)
void build_variant(ZeroTerms& z, const Layout& lay, const CommCosts& cc, const Space& space,
                   const sim::ComputeModel& cm, std::vector<int64_t>& sig, VariantMemo* memo) {
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
  const bool replica_on_lane = sharded && !space.training().framework_profile().replica_stream;
  const spec::FrameworkProfile framework = space.training().framework_profile(lay.tp, z.zero);
  const auto collective = [&](Op op, const program::Bucket& b) {
    sim::BucketCollective c;
    c.op = op;
    c.elems = b.elems;
    c.param_bytes = pbytes;
    c.bf16 = spec::storage_dtype(dtype) == spec::Dtype::kBf16;
    return c;
  };
  // the replicas' all-reduce of a bucket's shard: after each reduce-scatter, or (the framework's
  // replica_sync at step, with reductions every micro-batch) once a step (program/emit.cpp)
  const auto replica_s = [&](const program::Bucket& b) {
    return CommCosts::least_s(cc.replica_ar, program::shard_elems(b.elems, l) * rbytes);
  };
  const bool replica_at_step = replica_on_lane && z.zero >= 2 && dp > 1 &&
                               spec::replica_sync(zc, space.training().framework) == spec::ReplicaSync::kStep;
  const auto reduce_s = [&](const program::Bucket& b) {
    if (sharded) {
      const double rs = CommCosts::least_s(cc.shard_rs, b.elems * rbytes);
      return rs + (replica_on_lane && !replica_at_step ? replica_s(b) : 0.0);
    }
    if (zeropp) {
      const double a2a = b.qgz_matrices > 0 ? CommCosts::least_s(cc.shard_a2a, b.qgz_elems / 2) +
                                                   CommCosts::least_s(cc.cross_a2a, b.qgz_elems / (2 * l))
                                             : 0.0;
      return a2a + (b.qgz_fallbacks > 0 ? cc.dp_s(CollectiveKind::kReduceScatter, (b.elems - b.qgz_elems) * rbytes) : 0.0);
    }
    sim::BucketCollective c = collective(z.zero == 0 ? Op::kAllReduceGrads : Op::kReduceScatterGrads, b);
    c.bytes = b.elems * rbytes;
    c.pieces = std::max(1, b.collectives);
    return bucket_s(z.zero == 0 ? cc.dp_ar : cc.dp_rs, c, dp, framework, space.cluster());
  };
  const int64_t gather_bytes = zeropp ? 1 : pbytes;   // qwZ: int8 (its scales not counted)
  // over the whole group (`global`) or hpZ's secondary partition, as the lowering issues it
  const auto gather_over = [&](const program::Bucket& b, bool global) {
    sim::BucketCollective c = collective(Op::kGatherParams, b);
    c.bytes = b.elems * gather_bytes;
    c.flags = zeropp ? program::kFlagQuantized : program::kFlagNone;
    c.pieces = std::max(1, b.collectives) * (zeropp ? 2 : 1);
    return global ? bucket_s(cc.dp_ag, c, dp, framework, space.cluster()) : bucket_s(cc.shard_ag, c, l, framework, space.cluster());
  };
  const auto global_s = [&](const program::Bucket& b) { return gather_over(b, true); };
  const auto gather_s = [&](const program::Bucket& b) {
    if (sharded) return CommCosts::least_s(cc.shard_ag, b.elems * gather_bytes);   // MiCS: its two-level gather, at least one
    if (hpz) return std::min(global_s(b), gather_over(b, false));
    return global_s(b);
  };
  // experts apart over edp > 1: the ZeRO stage partitions them even where dp is 1
  const bool experts_sharded = lay.experts_apart && lay.expert_dp > 1;
  sig = {dpc || experts_sharded ? z.zero : -1, z.offload, z.overlap, static_cast<int64_t>(across ? z.variant : ZeroVariant::kPlain)};
  // the experts' own gradient buckets (program::expert_grad_buckets) are not in the terms below:
  // their reduce bucket is part of the signature as it stands
  if (experts_sharded) sig.push_back(reduce);
  z.gather_slope = sharded || hpz ? std::min(cc.dp_ag_slope, cc.shard_ag_slope) : cc.dp_ag_slope;
  // one communicator for plain ZeRO-3's gathers and reductions (all over the partition group)
  const bool shared = z.zero == 3 && dpc && !across && space.training().framework_profile(lay.tp, z.zero).one_dp_communicator;
  int64_t max_gathered = 0, least_bucket = 0;
  for (int64_t s = 0; s < pp; ++s) {
    const int64_t P = lay.stage_params[static_cast<std::size_t>(s)];
    const auto kind = static_cast<int>(across ? z.variant : ZeroVariant::kPlain);
    GradTerms g;
    if (memo) {
      auto [it, fresh] = memo->grads.try_emplace(std::make_tuple(s, reduce, prefetch, int{z.zero}, kind));
      if (fresh) it->second.first = grad_terms(m, lay, s, rule, reduce_s, it->second.second);
      g = it->second.first;
      sig.insert(sig.end(), it->second.second.begin(), it->second.second.end());
    } else {
      g = grad_terms(m, lay, s, rule, reduce_s, sig);
    }
    GatherStats gs;
    // hpZ: every bucket's first gather of the step is over the whole group
    const auto first_s = [&](const program::Bucket& b) { return hpz ? global_s(b) : gather_s(b); };
    if (z.zero == 3 && dpc && memo) {
      auto [it, fresh] = memo->gathers.try_emplace(std::make_tuple(s, prefetch, kind));
      if (fresh) it->second.first = gather_stats(lay, s, rule, gather_s, first_s, it->second.second);
      gs = it->second.first;
      sig.insert(sig.end(), it->second.second.begin(), it->second.second.end());
    } else if (z.zero == 3 && dpc) {
      gs = gather_stats(lay, s, rule, gather_s, first_s, sig);
    }
    max_gathered = std::max(max_gathered, gs.gathered);
    if (gs.smallest > 0) least_bucket = least_bucket == 0 ? gs.smallest : std::min(least_bucket, gs.smallest);
    add_regathers(z, gs, max_live, gather_bytes, space.training().framework_profile().prefetch);
    // reductions after the last compute: the last bucket, or every deferred one without overlap
    double last = dpc ? (z.overlap ? g.c0_last : (z.zero <= 1 ? g.all : g.c0_sum)) : 0.0;
    if (s == 0) last += tied_s;
    // every micro-batch (ZeRO-2/3) or once a step: the tied table's bucket and its sum over the
    // embedding group once a step whatever the stage
    const double rest = g.all - g.tied, once = g.tied + ((s == 0 || s == pp - 1) ? tied_s : 0.0);
    const bool per_mb = z.zero >= 2 && dpc;
    const int64_t persistent = z.zero == 3 && dpc ? lay.stage_persistent[static_cast<std::size_t>(s)] : 0;
    const int64_t experts = lay.experts_apart ? lay.stage_experts[static_cast<std::size_t>(s)] : 0;
    z.static_bytes.push_back(sim::model_states(P, persistent, zc, partition, dtype).total() +
                             (experts > 0 ? sim::model_states(experts, 0, zc, lay.expert_dp, dtype).total() : 0) +
                             sim::grad_bucket_buffer_bytes(zc, dp, P, pbytes) +
                             sim::hpz_secondary_bytes(P - persistent, zc, dp, pbytes));
    z.last_reduce_s.push_back(last);
    std::vector<int64_t> unused;
    const double replicas = replica_at_step ? grad_terms(m, lay, s, rule, replica_s, unused).all : 0.0;
    z.once_s.push_back((per_mb ? 0.0 : rest) + once + replicas);
    z.per_mb_s.push_back(per_mb ? rest : 0.0);
    z.gather_s.push_back(gs.once);
    z.after_s.push_back(after_terms(z, s, P, dp, cc, cm, pbytes));
    if (shared) {
      z.shared_once_s.push_back((per_mb ? 0.0 : rest) + g.tied);
      z.shared_per_mb_s.push_back(per_mb ? rest : 0.0);
    }
  }
  // max_live_parameters acts through `live + bucket > max_live` (make room) and `live < max_live`
  // (look ahead) alone (program/param_tracker.cpp), live being 0 or at least the smallest gathered
  // bucket: every value in (0, smallest bucket) lowers alike, as every value from the most a
  // stage gathers up
  if (z.zero == 3 && dpc) sig.push_back(max_live > 0 && max_live < least_bucket ? 1 : std::min(max_live, max_gathered));
}

void build_variants(Layout& lay, const CommCosts& cc, const Space& space, const sim::ComputeModel& cm) {
  VariantMemo memo;
  std::set<std::vector<int64_t>> seen;
  std::map<std::tuple<int, int, bool, int, int, int>, int32_t> without_offload;
  // the first variant of each timing signature
  std::map<std::vector<int64_t>, int8_t> timed_as;
  auto add = [&](ZeroTerms z) {
    std::vector<int64_t> sig;
    build_variant(z, lay, cc, space, cm, sig, &memo);
    z.timing_reduce_i = timed_as.try_emplace(sig, z.reduce_i).first->second;
    // the same Program: the same instructions and the same static memory (the reduce bucket's
    // buffer, min(reduce_bucket, P_s)·w, is the one static term the signature leaves out)
    sig.insert(sig.end(), z.static_bytes.begin(), z.static_bytes.end());
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

}  // namespace stagecraft::planner::detail
