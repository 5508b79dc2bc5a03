#include "planner/prune.hpp"
#include "planner/prune_detail.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/program/comm_rules.hpp"
#include "core/program/partition.hpp"
#include "core/program/schedules/schedules.hpp"
#include "core/program/units.hpp"
#include "sim/costs.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::planner {

using program::Op;
using program::UnitKind;


using detail::ChunkTimes;
using detail::PipeTerms;
using detail::CommCosts;
using detail::CpCosts;
using detail::EtpCosts;
using detail::Layout;
using detail::ZeroTerms;
using detail::build_variant;
using detail::build_variants;
using detail::set_variant;
using detail::variant_of;

namespace {

constexpr double kMargin = 1e-5;   // relative, for the simulator's per-instruction ns rounding

using detail::ns;

void fill_params(Layout& lay, const spec::Model& m, int64_t threshold) {
  const int64_t tied = program::tied_head_copy(m, lay.tp);
  lay.params.assign(static_cast<std::size_t>(lay.pp), {});
  lay.stage_params.assign(static_cast<std::size_t>(lay.pp), 0);
  lay.stage_persistent.assign(static_cast<std::size_t>(lay.pp), 0);
  lay.stage_experts.assign(static_cast<std::size_t>(lay.pp), 0);
  for (int64_t s = 0; s < lay.pp; ++s) {
    const bool has_embedding = lay.chunk(s, 0).unit_begin == 0;
    auto& params = lay.params[static_cast<std::size_t>(s)];
    params.resize(lay.units.size());
    for (int64_t c = 0; c < lay.v; ++c) {
      ChunkInfo& ch = lay.chunks[static_cast<std::size_t>(s * lay.v + c)];
      for (int32_t u = ch.unit_begin; u < ch.unit_end; ++u) {
        params[static_cast<std::size_t>(u)] = program::unit_params(
            lay.units, u, has_embedding, tied, threshold, lay.experts_apart ? program::TensorSet::kDense : program::TensorSet::kAll);
        if (lay.experts_apart) lay.stage_experts[static_cast<std::size_t>(s)] += lay.units[static_cast<std::size_t>(u)].expert_params;
        ch.params += params[static_cast<std::size_t>(u)].elems;
        lay.stage_persistent[static_cast<std::size_t>(s)] += params[static_cast<std::size_t>(u)].persistent;
      }
      lay.stage_params[static_cast<std::size_t>(s)] += ch.params;
    }
  }
}

// The simulator's gradient-norm all-reduce: NCCL's all-reduce of its few bytes over the world (with
// bias-based balancing, the routed counts beside it: emit.cpp).
double gradnorm_s(const sim::Topology& topology, int64_t world, const spec::Model& m) {
  if (world <= 1) return 0;
  std::vector<int64_t> all(static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
  const int64_t bytes = program::kGradNormBytes * (1 + program::router_bias_counts(m));
  return ns(sim::CollectiveCost(CollectiveKind::kAllReduce, all, topology).time_ns(bytes));
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

// The tensor-parallel collective times of one micro-batch's passes, per unit kind, where the
// lowering puts them (program::tp_collectives).
struct TpOps {
  bool any = false, sp = false;
  double ag = 0;                           // the all-gather of a received message (scatter-gather)
  std::array<double, 5> fwd_s{}, bwd_s{};  // by UnitKind: a forward (recompute) / backward pass's collectives
  std::array<double, 5> fwd_before{}, bwd_before{};  // by UnitKind: those before the pass's compute
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

// Expert parallelism's all-to-alls of one MoE unit's pass (program::moe_a2a_bytes, ep > 1) and
// expert tensor parallelism's gather and scatter (program::moe_etp_bytes, etp > 1): a forward (or
// recompute) has the dispatch and the gather (`to`) between its two computes and the scatter and
// the combine (`back`) after them; a backward the combine's gradient and the gather before its
// first compute and the scatter and the dispatch's gradient between them. Each at the
// contention-free time of the cheapest group placement, stretched by ρ as the simulator stretches
// it (training.moe_imbalance): no longer than any simulation of it.
struct EpOps {
  bool any = false;
  double to = 0, back = 0;
  double max_s = 0;   // the longest one of them
};

ChunkTimes chunk_times(const Layout& lay, const ChunkInfo& ch, const sim::ComputeModel& cm, const TpOps& tp, const CpOps& cp,
                       const EpOps& ep, const spec::Plan& plan, const Space& space, bool zb) {
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
  // Each unit's pass: the collectives before its compute, after it, and the ring's excess beside
  // it (what follows waits max(ring, compute)); per pass, those of the first unit's before
  // (pre), of the last unit's after and excess (out), and the rest (between two computes).
  struct Around {
    double before = 0, after = 0, between = 0;  // between: inside the pass, between two of its computes
  };
  const auto around = [&](int32_t u, Op op) {
    const UnitKind kind = lay.units[static_cast<std::size_t>(u)].kind;
    const bool forward = op == Op::kForward || op == Op::kRecompute;
    Around a;
    if (tp.any) {
      const auto k = static_cast<std::size_t>(kind);
      a.before = forward ? tp.fwd_before[k] : tp.bwd_before[k];
      a.after = (forward ? tp.fwd_s[k] : tp.bwd_s[k]) - a.before;
    }
    if (cp.any && kind == UnitKind::kAttention) {
      const double ring = forward ? cp.fwd_ring : cp.bwd_ring;
      a.before += forward ? cp.fwd_before : cp.bwd_before;
      a.after += (forward ? cp.fwd_block - cp.fwd_before : cp.bwd_block - cp.bwd_before) +
                 (ring > 0 ? std::max(0.0, ring - cm.compute_s(op, u, u + 1)) : 0.0);
    }
    if (ep.any && kind == UnitKind::kMoe && op != Op::kBackwardWeight) {
      (forward ? a.after : a.before) += forward ? ep.back : ep.to;
      a.between += forward ? ep.to : ep.back;
    }
    return a;
  };
  const Op bop = zb ? Op::kBackwardInput : Op::kBackward;
  double fpre = 0, fout = 0, bpre = 0, bout = 0;
  for (int32_t u = ch.unit_begin; u < ch.unit_end; ++u) {
    const Unit& unit = lay.units[static_cast<std::size_t>(u)];
    const Around f = around(u, Op::kForward), b = around(u, bop);
    tf += f.before + f.after + f.between;
    tb += b.before + b.after + b.between;
    if (u == ch.unit_begin) {
      fpre = f.before;
      bout = b.after;
    }
    if (u == ch.unit_end - 1) {
      fout = f.after;
      bpre = b.before;
    }
    if (full && u >= rb && u < re) {
      const Around r = around(u, Op::kRecompute);
      tb += r.before + r.after + r.between;
    }
    act += sim::activation_bytes_per_token(unit, m, plan, space.training(), plan.recompute);
  }
  // full recompute: the backward step may begin with a block's recompute (the lowering recomputes
  // each block just before its backward): its collectives before it at most those of any unit
  double rpre = 0;
  for (int32_t u = rb; R > 0 && u < re; ++u) rpre = std::max(rpre, around(u, Op::kRecompute).before);
  bpre = std::max(bpre, rpre);
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
    // full recompute: the backward step may begin with a block's recompute and its collectives
    if (R > 0) t.pre_bwd = std::max(t.pre_bwd, rpre + (gather_recv && lay.has_next(ch) ? tp.ag : 0.0));
  }
  const double op = std::max({tp.max_op(), cp.max_s, ep.max_s});
  t.busy = F + B + R + std::max(0.0, tf - op) + std::max(0.0, tb - op);
  // From a pass's first compute: its computes and the collectives between them, then what
  // follows its last compute before it can send. ZB-H1's W after its B: no more than busy's B.
  t.fwd_serial = F + std::max(0.0, t.fwd_chain - F - fpre - fout);
  t.fwd_out = fout;
  t.bwd_serial = (zb ? Bi : B) + R + std::max(0.0, t.bwd_chain - (zb ? Bi : B) - R - bpre - bout);
  t.bwd_out = bout;
  t.w_serial = zb ? std::max(0.0, std::min(B - Bi, cm.compute_s(Op::kBackwardWeight, ch.unit_begin, ch.unit_end))) : 0.0;
  // the received message's all-gather (scatter-gather) before a forward's first compute
  t.recv_fwd = gather_recv && lay.has_prev(ch) ? tp.ag : 0.0;
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

void detail::add_path(PipeTerms& t) {
  if (t.path_added) return;
  t.path = pipeline_path(*t.steps, t.v, t.micro_batches, t.times, t.links);
  t.path_added = true;
}


std::vector<double> detail::pipeline_path(const std::vector<std::vector<program::Step>>& steps, int64_t v, int64_t m,
                                          const std::vector<ChunkTimes>& times, const std::vector<double>& link) {
  const auto p = static_cast<int64_t>(steps.size());
  const int64_t chunks = p * v;
  // when each (model chunk, micro-batch)'s forward and backward message arrives at its receiver; −1: not yet
  std::vector<double> fsent(static_cast<std::size_t>(chunks * m), -1.0), bsent(fsent.size(), -1.0);
  std::vector<std::size_t> pos(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0);   // the previous step's last compute ends
  std::vector<double> held(static_cast<std::size_t>(p), 0.0);      // its blocking send has arrived
  std::size_t total = 0, done = 0;
  for (const auto& st : steps) total += st.size();
  const auto at = [&](int64_t k, int32_t mb) { return static_cast<std::size_t>(k * m + mb); };
  const auto advance = [&](int64_t s) {
    bool moved = false;
    const auto& st = steps[static_cast<std::size_t>(s)];
    std::size_t& i = pos[static_cast<std::size_t>(s)];
    const auto si = static_cast<std::size_t>(s);
    while (i < st.size()) {
      const program::Step& step = st[i];
      const int64_t k = step.chunk * p + s;   // model position
      const ChunkTimes& t = times[static_cast<std::size_t>(s * v + step.chunk)];
      const bool fwd = step.pass == program::Pass::kForward, w = step.pass == program::Pass::kBackwardWeight;
      double start = std::max(free_at[si], held[si]);
      if (fwd && k > 0) {
        const double arrived = fsent[at(k - 1, step.mb)];
        if (arrived < 0) break;
        start = std::max(start, arrived + t.recv_fwd);
      } else if (!fwd && !w && k + 1 < chunks) {
        const double arrived = bsent[at(k + 1, step.mb)];
        if (arrived < 0) break;
        start = std::max(start, arrived);
      }
      const double end = start + (fwd ? t.fwd_serial : w ? t.w_serial : t.bwd_serial);
      free_at[si] = end;
      held[si] = 0;
      if (fwd && k + 1 < chunks) {   // to the next model chunk, on stage s + 1 (or the wrap to 0)
        held[si] = fsent[at(k, step.mb)] = end + t.fwd_out + link[si];
      } else if (!fwd && !w && k > 0) {   // to the previous one, on stage (k − 1) mod p
        held[si] = bsent[at(k, step.mb)] = end + t.bwd_out + link[static_cast<std::size_t>((k - 1) % p)];
      }
      ++i;
      ++done;
      moved = true;
    }
    return moved;
  };
  while (done < total) {
    bool moved = false;
    for (int64_t s = 0; s < p; ++s) moved |= advance(s);        // forwards flow down,
    for (int64_t s = p - 1; s >= 0; --s) moved |= advance(s);   // backwards up
    if (!moved) return {};
  }
  return free_at;
}

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
          const int64_t dp = space.gpus() / (tp * pp * cp);
          for (int64_t ep : space.ep_values(tp, cp, dp)) {
            for (int64_t etp : space.etp_values(tp, cp, dp, ep)) {
              for (spec::MoeDispatcher d : space.moe_dispatchers(ep, etp)) {
                for (int64_t mb : space.micro_batch_values(dp)) out.push_back({tp, pp, mb, cp, comm, ep, etp, d});
              }
            }
          }
        }
      }
    }
  }
  return out;
}

Pruner::Pruner(const Space& space) : space_(space), topology_(space.cluster(), space.gpus()) {}
Pruner::~Pruner() = default;

const sim::ComputeModel& Pruner::compute(int64_t tp, bool sp, spec::Recompute rc, int64_t mb, int64_t cp, spec::CpComm comm,
                                         int64_t ep, int64_t etp, spec::MoeDispatcher dispatcher) {
  const auto key = std::make_tuple(tp, sp, static_cast<int>(rc), mb, cp, static_cast<int>(comm), ep, etp,
                                   static_cast<int>(dispatcher));
  auto it = computes_.find(key);
  if (it != computes_.end()) return *it->second->model;
  auto entry = std::make_unique<ComputeEntry>();
  entry->plan.tp = tp;
  entry->plan.sequence_parallel = sp;
  entry->plan.recompute = rc;
  entry->plan.micro_batch = mb;
  entry->plan.cp = cp;
  entry->plan.cp_comm = comm;
  entry->plan.ep = ep;
  entry->plan.etp = etp;
  entry->plan.moe_dispatcher = dispatcher;
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
  cc->gradnorm_s = gradnorm_s(topology_, space_.gpus(), space_.model());
  cc->set_slope();
  return *comms_.emplace(key, std::move(cc)).first->second;
}

const Layout& Pruner::layout(int64_t tp, int64_t pp, int64_t v, Split split, int64_t ep, int64_t etp) {
  const auto key = std::make_tuple(tp, pp, v, static_cast<int>(split), ep, etp);
  auto it = layouts_.find(key);
  if (it != layouts_.end()) return *it->second;
  if (!layouts_.empty() && (std::get<0>(layouts_.begin()->first) != tp || std::get<1>(layouts_.begin()->first) != pp)) {
    layouts_.clear();   // groups come (tp, pp)-major: keep one pair's layouts only
    comms_.clear();
    steps_.clear();
  }
  const spec::Model& m = space_.model();
  auto lay = std::make_unique<Layout>();
  lay->tp = tp;
  lay->pp = pp;
  lay->v = v;
  lay->dp = space_.gpus() / (tp * pp);
  lay->split = split;
  lay->units = program::model_units(m, tp, ep, etp);
  lay->ep = ep;
  lay->etp = etp;
  lay->expert_dp = tp * lay->dp / (ep * etp);   // lay->dp counts dp · cp (spec::Plan::expert_dp)
  lay->experts_apart = m.moe.on() && lay->expert_dp != lay->dp;
  spec::Plan p;
  p.tp = tp;
  p.pp = pp;
  p.ep = ep;
  p.etp = etp;
  p.virtual_stages = v;
  if (split == Split::kUniform) {
    for (int64_t s = 0; s < pp; ++s) p.stage_layers.push_back(m.layers / pp + (s < m.layers % pp ? 1 : 0));
  }
  lay->chunk_layers = program::chunk_layers(m, p, lay->units);
  if (split == Split::kUniform) lay->duplicate = layout(tp, pp, v, Split::kBalanced, ep, etp).chunk_layers == lay->chunk_layers;
  lay->stage_layers = program::stage_layers_of(lay->chunk_layers, pp);
  lay->chunks = program::place_chunks(m, pp, v, lay->chunk_layers);
  spec::ZeroConfig z3;
  z3.stage = 3;  // the ZeRO-3 variants' threshold (the others gather nothing)
  fill_params(*lay, m, program::persistence_threshold(z3, space_.training().framework_profile()));
  build_variants(*lay, comm(tp, pp), space_, compute(tp, false, spec::Recompute::kNone, 1, 1, spec::CpComm::kP2p, ep, etp));
  return *layouts_.emplace(key, std::move(lay)).first->second;
}

const std::vector<std::vector<program::Step>>& Pruner::steps(int64_t p, int64_t m, int64_t v, spec::Schedule schedule) {
  const auto key = std::make_tuple(p, m, v, static_cast<int>(schedule));
  auto it = steps_.find(key);
  if (it != steps_.end()) return it->second;
  spec::Plan plan;
  plan.pp = p;
  plan.micro_batches = m;
  plan.virtual_stages = v;
  plan.schedule = schedule;
  return steps_.emplace(key, program::schedule_steps(plan)).first->second;
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
  double after = 0;    // ... and on their backward of the last micro-batch
  for (std::size_t s = 0; s < p; ++s) {
    const double dp_tail = z.last_reduce_s[s] + z.after_s[s];
    // every micro-batch's serial gathers, less what each boundary's tp collectives may hide
    const double serial = std::max(0.0, static_cast<double>(m) * (z.serial_g[s] - static_cast<double>(z.serial_n[s]) * pipe.tp_gap) +
                                            z.first_extra[s]);
    const double switched = std::max(0.0, z.serial_switch[s] - pipe.step_gap);
    const double run = pipe.head[s] + before + pipe.busy[s] + serial + static_cast<double>(pipe.switches[s]) * switched;
    lb = std::max(lb, run + dp_tail);
    if (!pipe.path.empty()) lb = std::max(lb, pipe.path[s] + dp_tail);
    if (!pipe.zb) lb = std::max(lb, run + pipe.tail[s] + after + dp_tail_0);
    before += std::max(0.0, z.first_g[s] - static_cast<double>(z.first_n[s]) * pipe.tp_gap);
    after += std::max(0.0, z.again_g[s] - static_cast<double>(z.first_n[s]) * pipe.tp_gap);
    lb = std::max(lb, pipe.head[s] + pipe.first_fwd[s] + z.once_s[s] + static_cast<double>(m) * z.per_mb_s[s] + z.after_s[s]);
    const double gathers = std::max(z.gather_s[s], z.gather_slope * static_cast<double>(m) * z.regather_bytes[s]);
    lb = std::max(lb, gathers);
    if (!z.shared_once_s.empty()) {  // gathers and reductions on one communicator, one at a time
      lb = std::max(lb, z.shared_once_s[s] + static_cast<double>(m) * z.shared_per_mb_s[s] + gathers);
    }
    const int64_t mem = z.static_bytes[s] + reserved + pipe.p2p_buffers + static_cast<int64_t>(pipe.held[s]);
    e.memory_lb_bytes = std::max(e.memory_lb_bytes, mem);
  }
  e.step_time_lb_s = lb * (1 - kMargin);
  return e;
}

// A candidate's bounds: the memory bound reads no path, so a plan that cannot fit (over
// `capacity`) gets none (its time bound, one term short, stays a bound); one that fits gets the
// path, computed once for its terms.
Estimate bounds(PipeTerms& terms, const ZeroTerms& z, int64_t m, int64_t reserved, int64_t capacity) {
  const Estimate e = combine(terms, z, m, reserved);
  if (e.memory_lb_bytes > capacity || terms.path_added) return e;
  add_path(terms);
  return combine(terms, z, m, reserved);
}


// `overlap`: TP communication overlap, the simulator's rule (sim/models/tp_overlap.hpp).
// `shared_experts`: a MoE unit's shared experts (a tp-split MLP) issue the MLP's collectives.
TpOps tp_ops(const CommCosts& cc, int64_t tp, bool sp, int64_t tokens, int64_t hidden, int64_t abytes,
             const sim::TpOverlap& overlap, bool shared_experts) {
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
  for (UnitKind kind : {UnitKind::kEmbedding, UnitKind::kAttention, UnitKind::kMlp, UnitKind::kHead, UnitKind::kMoe}) {
    for (Op pass : {Op::kForward, Op::kBackward}) {
      const program::TpAround around = program::tp_collectives(kind, pass, sp, tokens, hidden, abytes, shared_experts);
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

// The expert-parallel groups of every simulated rank (each stage's, one per distinct offset within
// a node), their all-to-all's cost.
const std::vector<sim::CollectiveCost>& Pruner::ep_costs(int64_t tp, int64_t pp, int64_t ep, int64_t etp) {
  CommCosts& cc = comm(tp, pp);
  auto it = cc.ep.find({ep, etp});
  if (it != cc.ep.end()) return it->second;
  std::vector<sim::CollectiveCost> costs;
  program::Placement pl{tp, pp, space_.gpus() / (tp * pp)};
  pl.ep = ep;
  pl.etp = etp;
  const int64_t gpn = space_.cluster().gpus_per_node;
  std::set<std::vector<int64_t>> seen;
  for (int64_t s = 0; s < pp; ++s) {
    for (int64_t l = 0; l < tp * pl.dp; ++l) {
      std::vector<int64_t> group = pl.group_members(program::Group::kEp, pl.rank(s, l / tp, l % tp));
      std::vector<int64_t> shape = group;   // the group's offsets from its first member's node
      for (int64_t& r : shape) r -= group.front() - group.front() % gpn;
      if (!seen.insert(shape).second) continue;
      costs.emplace_back(CollectiveKind::kAllToAll, group, topology_);
    }
  }
  return cc.ep.emplace(std::make_pair(ep, etp), std::move(costs)).first->second;
}

// The experts' tensor-parallel groups (etp consecutive places of a stage), or their tensor-and-
// expert-parallel groups (etp·ep consecutive places), likewise.
const EtpCosts& Pruner::expert_costs(int64_t tp, int64_t pp, int64_t ep, int64_t etp, program::Group kind) {
  CommCosts& cc = comm(tp, pp);
  const auto key = std::make_tuple(static_cast<int>(kind), ep, etp);
  auto it = cc.etp.find(key);
  if (it != cc.etp.end()) return it->second;
  EtpCosts costs;
  program::Placement pl{tp, pp, space_.gpus() / (tp * pp)};
  pl.ep = ep;
  pl.etp = etp;
  const int64_t gpn = space_.cluster().gpus_per_node;
  const int64_t size = kind == program::Group::kExpertTp ? etp : etp * ep;
  std::set<std::vector<int64_t>> seen;
  for (int64_t s = 0; s < pp; ++s) {
    for (int64_t l = 0; l < tp * pl.dp; l += size) {
      const std::vector<int64_t> group = pl.group_members(kind, pl.rank(s, l / tp, l % tp));
      std::vector<int64_t> shape = group;
      for (int64_t& r : shape) r -= group.front() - group.front() % gpn;
      if (!seen.insert(shape).second) continue;
      costs.ag.emplace_back(CollectiveKind::kAllGather, group, topology_);
      costs.rs.emplace_back(CollectiveKind::kReduceScatter, group, topology_);
      if (kind == program::Group::kExpertTpEp && space_.model().moe.on()) {
        const sim::DispatchRouting routing = sim::dispatch_routing(space_.model(), ep, etp);
        costs.dispatch.emplace_back(CollectiveKind::kAllToAll, group, topology_, &routing);
      }
    }
  }
  return cc.etp.emplace(key, std::move(costs)).first->second;
}

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
                       spec::CpComm cp_comm, spec::MoeDispatcher dispatcher) {
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
  const sim::ComputeModel& cm = compute(lay.tp, sp, rc, mb, cp, cp_comm, lay.ep, lay.etp, dispatcher);
  const TpOps ops = tp_ops(cc, lay.tp, sp, tokens, m.hidden, abytes, cm.tp_overlap(), m.moe.shared_ffn_hidden > 0);
  const CpOps cps = cp > 1 ? cp_ops(cp_costs(lay.tp, lay.pp, cp), cp_comm, cp, tokens, program::cp_shapes(m, lay.tp, abytes)) : CpOps{};
  EpOps eps;
  if (m.moe.on() && dispatcher == spec::MoeDispatcher::kAllGather && lay.ep * lay.etp > 1) {
    // the all-gather dispatcher's: routed or not, every rank moves the group's tokens (no ρ)
    eps.any = true;
    const EtpCosts& ec = expert_costs(lay.tp, lay.pp, lay.ep, lay.etp, program::Group::kExpertTpEp);
    const program::MoeAllGatherBytes b = program::moe_allgather_bytes(tokens, m, lay.tp, lay.ep * lay.etp, abytes);
    const double ag = CommCosts::least_s(ec.ag, b.gather), rs = CommCosts::least_s(ec.rs, b.scatter);
    const double gag = CommCosts::least_s(ec.ag, b.grad_gather), grs = CommCosts::least_s(ec.rs, b.grad_scatter);
    eps.to = std::min(ag, gag);      // forward's gather, backward's (the scatter's gradient)
    eps.back = std::min(rs, grs);    // likewise
    eps.max_s = std::max({ag, rs, gag, grs});
  } else if (m.moe.on() && dispatcher == spec::MoeDispatcher::kFlex && lay.ep * lay.etp > 1) {
    // the flex dispatcher's: DeepEP's dispatch and combine over the etp·ep ranks, ρ on the busiest
    eps.any = true;
    const EtpCosts& ec = expert_costs(lay.tp, lay.pp, lay.ep, lay.etp, program::Group::kExpertTpEp);
    const double a2a = CommCosts::least_s(ec.dispatch, program::moe_flex_bytes(tokens, m, lay.tp, lay.ep, lay.etp, abytes)) *
                       cm.moe_imbalance();
    eps.to = eps.back = eps.max_s = a2a;
  } else if (m.moe.on() && (lay.ep > 1 || lay.etp > 1)) {
    eps.any = true;
    const double a2a = lay.ep > 1 ? CommCosts::least_s(ep_costs(lay.tp, lay.pp, lay.ep, lay.etp),
                                                        program::moe_a2a_bytes(tokens, m, lay.tp, abytes))
                                  : 0.0;
    double ag = 0, rs = 0;
    if (lay.etp > 1) {
      const EtpCosts& ec = expert_costs(lay.tp, lay.pp, lay.ep, lay.etp, program::Group::kExpertTp);
      const int64_t S = program::moe_etp_bytes(tokens, m, lay.tp, lay.etp, abytes);
      ag = CommCosts::least_s(ec.ag, S);
      rs = CommCosts::least_s(ec.rs, S);
    }
    eps.to = (a2a + ag) * cm.moe_imbalance();
    eps.back = (rs + a2a) * cm.moe_imbalance();
    eps.max_s = std::max({a2a, ag, rs}) * cm.moe_imbalance();
  }
  std::vector<ChunkTimes> times;
  times.reserve(lay.chunks.size());
  for (const ChunkInfo& ch : lay.chunks) {
    times.push_back(chunk_times(lay, ch, cm, ops, cps, eps, plan, space_, schedule == spec::Schedule::kZbH1));
  }
  static const std::vector<int64_t> none;
  const std::vector<int64_t>& sw = schedule == spec::Schedule::kInterleaved ? switches(lay.pp, micro_batches, lay.v) : none;
  const int64_t p2p_bytes = program::p2p_message_bytes(tokens, m.hidden, lay.tp, abytes);
  PipeTerms t = pipe_terms(lay, times, cc, schedule, micro_batches, p2p_bytes, sw);
  t.links.assign(static_cast<std::size_t>(lay.pp), 0.0);
  for (std::size_t i = 0; i < cc.p2p.size() && i < t.links.size(); ++i) t.links[i] = ns(cc.p2p[i].time_ns(p2p_bytes));
  t.steps = &steps(lay.pp, micro_batches, lay.v, schedule);
  t.micro_batches = micro_batches;
  t.v = lay.v;
  t.times = std::move(times);
  // what a ZeRO-3 gather may overlap between two computes: tp collectives, and with cp its
  // blocking collectives and the ring's excess
  t.tp_gap = (ops.any ? 2 * ops.max_op() : 0.0) + (cps.any ? 2 * cps.max_s + std::max(cps.fwd_ring, cps.bwd_ring) : 0.0) +
             (eps.any ? eps.to + eps.back : 0.0);
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
  c.ep = static_cast<int16_t>(g.ep);
  c.etp = static_cast<int16_t>(g.etp);
  c.moe_dispatcher = g.moe_dispatcher;
  c.micro_batch = static_cast<int32_t>(g.micro_batch);
  c.micro_batches = static_cast<int32_t>(micro_batches);
  c.virtual_stages = static_cast<int16_t>(v);
  c.schedule = schedule;
  c.split = lay.split;
  const bool flex_twin = flex_is_all_to_all(g);
  // a dominated duplicate's bounds are never read (Visitor): not computed
  const bool all_dominated = lay.duplicate || flex_twin;
  for (bool sp : space_.sequence_parallel_values(g.tp, g.cp)) {
    for (spec::Recompute rc : space_.recompute_values()) {
      c.sequence_parallel = sp;
      c.recompute = rc;
      std::optional<PipeTerms> terms;
      if (!all_dominated) terms = pipe(lay, g.micro_batch, sp, rc, schedule, g.cp, g.cp_comm, g.moe_dispatcher);
      for (const ZeroTerms& z : lay.variants) {
        if (g.cp > 1 && z.variant != ZeroVariant::kPlain) continue;   // not with cp (spec::validate_plan)
        // experts apart: no ZeRO-3, no ZeRO across nodes (spec::validate_plan)
        if (lay.experts_apart && (z.zero == 3 || z.variant != ZeroVariant::kPlain)) continue;
        set_variant(c, z);
        if (all_dominated || z.duplicate ||
            (z.twin >= 0 && combine(*terms, lay.variants[static_cast<std::size_t>(z.twin)], micro_batches, reserved)
                                    .memory_lb_bytes <= capacity)) {   // offload only where the plan without it cannot fit
          visit(c, Verdict::kDominated, Estimate{});
          continue;
        }
        Estimate e = bounds(*terms, z, micro_batches, reserved, capacity);
        e.timing_reduce_i = z.timing_reduce_i;
        visit(c, e.memory_lb_bytes > capacity ? Verdict::kMemory : Verdict::kKeep, e);
      }
    }
  }
}

// The flex dispatcher where it moves exactly what the all-to-all does — etp 1 and, on every
// placement of the expert-parallel group, the same bytes on the binding link (one expert a GPU
// inside one node: a token's copies reach distinct GPUs of one node either way) — is the
// all-to-all plan again, needing DeepEP for nothing: a dominated duplicate.
bool Pruner::flex_is_all_to_all(const Group& g) {
  if (g.moe_dispatcher != spec::MoeDispatcher::kFlex || g.etp != 1) return false;
  const EtpCosts& ec = expert_costs(g.tp, g.pp, g.ep, g.etp, program::Group::kExpertTpEp);
  return std::all_of(ec.dispatch.begin(), ec.dispatch.end(),
                     [](const sim::CollectiveCost& c) { return std::fabs(c.flow_scale() - 1.0) < 1e-12; });
}

void Pruner::enumerate(const Group& g, const Visitor& visit) {
  const int64_t dp = space_.gpus() / (g.tp * g.pp * g.cp);
  const int64_t micro_batches = space_.training().global_batch / (dp * g.micro_batch);
  for (Split split : space_.split_values(g.pp)) {
    for (spec::Schedule s : space_.schedules(g.pp)) {
      enumerate_layout(g, layout(g.tp, g.pp, 1, split, g.ep, g.etp), 1, s, visit);
    }
    for (int64_t v : space_.virtual_stage_values(g.pp, micro_batches)) {
      enumerate_layout(g, layout(g.tp, g.pp, v, split, g.ep, g.etp), v, spec::Schedule::kInterleaved, visit);
    }
  }
}

Estimate Pruner::estimate(const Candidate& c) {
  const Layout& lay = layout(c.tp, c.pp, c.virtual_stages, c.split, c.ep, c.etp);
  ZeroTerms z = variant_of(c);
  std::vector<int64_t> sig;
  build_variant(z, lay, comm(c.tp, c.pp), space_, compute(c.tp, false, spec::Recompute::kNone, 1, 1, spec::CpComm::kP2p, c.ep, c.etp), sig);
  const int64_t micro_batches = space_.training().global_batch / (lay.dp / c.cp * c.micro_batch);
  PipeTerms terms = pipe(lay, c.micro_batch, c.sequence_parallel, c.recompute, c.schedule, c.cp, c.cp_comm, c.moe_dispatcher);
  return bounds(terms, z, micro_batches, space_.cluster().gpu.reserved_bytes, space_.cluster().gpu.memory_bytes);
}

}  // namespace stagecraft::planner
