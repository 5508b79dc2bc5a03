#include "sim/simulation.hpp"
#include "core/spec/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/engine/engine.hpp"
#include "sim/error.hpp"
#include "sim/symmetry.hpp"

namespace stagecraft::sim {

using program::Group;
using program::Instr;
using program::Lane;
using program::Op;

namespace {

// Durations are ≥ 0: round half up without a libm call.
int64_t to_ns(double s) { return static_cast<int64_t>(s * 1e9 + 0.5); }

// Appends [begin, end) to a list kept in begin order where it can: a lane's intervals arrive in
// order, so touching ones merge as they come and the union at the end has little left to do.
[[gnu::always_inline]] inline void add_interval(std::vector<Interval>& v, int64_t begin, int64_t end) {
  if (!v.empty() && v.back().begin <= begin && begin <= v.back().end) {
    v.back().end = std::max(v.back().end, end);
  } else {
    v.push_back({begin, end});
  }
}

std::size_t lane_count(const program::RoleGraph& g, Lane lane) {
  return static_cast<std::size_t>(g.lane_count[static_cast<int>(lane)]);
}

// The training the compute model reads: the Program's, or with the options' load imbalance.
spec::Training with_imbalance(const spec::Training& t, double rho) {
  spec::Training out = t;
  if (rho > 0) out.moe_imbalance = rho;
  return out;
}

}  // namespace

Simulation::Simulation(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options)
    : prog_(prog),
      cluster_(cluster),
      options_(options),
      folding_(options.fast_paths),
      eager_(options.fast_paths && options.network != NetworkModel::kShared),
      usage_(!options.step_time_only),
      topology_(cluster, prog.placement.world()),
      net_(topology_),
      compute_(prog.model, cluster, with_imbalance(prog.training, options.moe_imbalance), prog.plan),
      costs_(prog, topology_, cluster) {
  if (usage_) memory_rules_.emplace(prog, cluster);
  if (compute_.tp_overlap().on || compute_.tp_overlap().async_grad) {
    const auto units = program::shared_model_units(prog.model, prog.plan.tp, prog.plan.ep, prog.plan.etp);
    for (const program::Unit& u : *units) unit_kinds_.push_back(u.kind);
  }
  if (options.network == NetworkModel::kShared && cluster.gpu.sm_count > 0) {
    beside_ = true;
    const double f = nccl_sm_fraction(cluster);
    sm_share_ = f < 1 ? f / (1 - f) : 0.0;
  }
  net_.set_fast_paths(options.fast_paths);
  graphs_.resize(prog.roles.size());
  // a straggler breaks the replicas' symmetry: every rank runs
  every_rank_ = options.full || !options.fast_paths || cluster.straggler.has_value();
  for (int64_t r : simulated_ranks(prog.placement, every_rank_)) add_rank(r);
  if (const auto& s = cluster.straggler; s && s->kind != spec::Straggler::Kind::kNic) {
    const int64_t per = s->kind == spec::Straggler::Kind::kNode ? cluster.gpus_per_node : 1;
    const int64_t world = prog.placement.world();
    if (s->first * per >= world) {
      throw spec::SpecError(cluster.name, "/straggler/first", "a " + std::string(spec::to_string(s->kind)) +
                                                              " among those the plan's " + std::to_string(world) +
                                                              " GPUs use, got " + std::to_string(s->first));
    }
    for (RankState& st : ranks_) {
      if (spec::computes_slowly(*s, st.rank, cluster.gpus_per_node)) st.slow = s->slowdown;
    }
  } else if (s && (topology_.nodes() < 2 || s->first >= topology_.nodes() * topology_.nics_per_node())) {
    throw spec::SpecError(cluster.name, "/straggler/first", "a NIC among the " +
                                                            std::to_string(topology_.nodes() > 1 ? topology_.nodes() * topology_.nics_per_node() : 0) +
                                                            " the plan's GPUs use (NICs join nodes: one node uses none), got " +
                                                            std::to_string(s->first));
  }
  if (!every_rank_ && topology_.nodes() > 1 && options.network == NetworkModel::kShared) share_core_links();
  std::size_t flows = 0;   // at most one flow per p2p send and per dp collective of a rank
  std::size_t messages = 0;  // one per send and one per receive at most (a peer may not be simulated)
  // per cost group, counted once: its simulated members and the nodes it spans (a world group
  // of 16,384 GPUs is 16,384 lookups, and every simulated rank is in it)
  struct GroupFacts {
    int32_t needed = -1;
    int64_t nodes = 0;
  };
  std::vector<GroupFacts> facts;
  for (RankState& st : ranks_) {
    flows += lane_count(*st.graph, Lane::kPpSend) + lane_count(*st.graph, Lane::kDpGather) +
             lane_count(*st.graph, Lane::kDpReduce) + lane_count(*st.graph, Lane::kDpReplica);
    messages += lane_count(*st.graph, Lane::kPpSend) + lane_count(*st.graph, Lane::kPpRecv);
    // the data-parallel subgroups only where the list uses them (plain plans have none)
    std::array<bool, program::kGroupCount> used{};
    for (const Instr& in : st.role->instrs) used[static_cast<std::size_t>(in.group)] = true;
    for (Group g : program::kGroups) {
      if (g >= Group::kDpShard && !used[static_cast<std::size_t>(g)]) continue;
      GroupView& v = st.groups[static_cast<int>(g)];
      v.last.fill({-1, -1});
      v.cost_group = costs_.group_of(g, st.rank);
      const std::span<const int64_t> group = costs_.members(v.cost_group);
      v.front = group.front();
      if (facts.size() <= static_cast<std::size_t>(v.cost_group)) facts.resize(static_cast<std::size_t>(v.cost_group) + 1);
      GroupFacts& f = facts[static_cast<std::size_t>(v.cost_group)];
      if (f.needed < 0) {
        f.needed = 0;
        for (int64_t m : group) f.needed += slot_of_.count(m) ? 1 : 0;
        f.nodes = nodes_spanned(group, cluster.gpus_per_node);
      }
      v.needed = options.alone ? 1 : f.needed;
      // (a middle stage is no member of the embedding group and never issues its collectives)
      const auto at = std::find(group.begin(), group.end(), st.rank);
      if (at == group.end()) continue;
      v.ring = ring_flow_at(group, at - group.begin(), f.nodes);
      topology_.route_into(st.rank, v.ring.successor, v.route);
    }
  }
  flow_owner_.reserve(flows);
  messages_.reserve(messages);
  // Alone, the stages before a rank's (simulator.hpp contention_free_stage_s): micro-batch 0's
  // forward of chunk 0 runs on each of them before the rank's first activation can arrive, and
  // the backward of chunk 0 (ZB-H1's input-gradient pass, which its every B step is) on each of
  // them after the rank sends a gradient from chunk 0 — compute times the compute model gives by
  // unit, less 1 ns a unit for each instruction's rounding.
  if (options.alone && prog.placement.pp > 1) {
    const Op backward = prog.plan.schedule == spec::Schedule::kZbH1 ? Op::kBackwardInput : Op::kBackward;
    for (RankState& st : ranks_) {
      double fill = 0, drain = 0;
      int64_t units = 0;
      for (int64_t s = 0; s < st.role->stage; ++s) {
        const program::ChunkInfo& c = prog.chunk(s, 0);
        fill += compute_.compute_s(Op::kForward, c.unit_begin, c.unit_end);
        drain += compute_.compute_s(backward, c.unit_begin, c.unit_end);
        units += c.unit_end - c.unit_begin;
      }
      st.fill_ns = std::max<int64_t>(0, static_cast<int64_t>(std::floor(fill * 1e9)) - units);
      st.drain_ns = std::max<int64_t>(0, static_cast<int64_t>(std::floor(drain * 1e9)) - units);
    }
  }
  // Step time only, with the Program's chains given: time each chain of a list in one go
  // (chains.hpp) — on the fast paths, for ranks that are the one simulated member of their tp
  // group (its collectives then wait for no one). Chains found without the overlap rule are
  // exact only where NCCL beside compute is not charged.
  const std::vector<Chains>* chains = options.chains;
  if (!usage_ && !options.record_trace && options.fast_paths && chains != nullptr && chains->size() == prog.roles.size() &&
      (!beside_ || chains->empty() || chains->front().overlap_free)) {
    for (RankState& st : ranks_) {
      if (st.groups[static_cast<int>(Group::kTp)].needed > 1) continue;
      const auto role = static_cast<std::size_t>(st.role - prog.roles.data());
      const Chains& ch = (*chains)[role];
      if (ch.members > 0 && ch.of.size() == st.role->instrs.size() && ch.shape.size() == ch.begin.size()) {
        st.chains = &ch;
        st.timing.resize(ch.begin.size());
      }
    }
  }
}

void Simulation::add_rank(int64_t r) {
  const program::Placement& pl = prog_.placement;
  RankState st;
  st.rank = r;
  const auto role = static_cast<std::size_t>(prog_.rank_role[static_cast<std::size_t>(r)]);
  st.role = &prog_.roles[role];
  st.graph = &program::graph_of(prog_.roles[role], graphs_[role]);
  st.waiting = st.graph->preds;
  if (eager_) st.ready.assign(st.waiting.size(), 0);
  st.done.assign(st.waiting.size(), 0);
  if (usage_) {
    const program::RoleGraph& g = *st.graph;
    st.memory.reserve(lane_count(g, Lane::kCompute) + lane_count(g, Lane::kDpGather));
    st.compute.reserve(lane_count(g, Lane::kCompute));
    st.traffic[0].reserve(lane_count(g, Lane::kTp));
    st.traffic[1].reserve(lane_count(g, Lane::kPpSend) + lane_count(g, Lane::kPpRecv));
    st.traffic[2].reserve(lane_count(g, Lane::kDpGather) + lane_count(g, Lane::kDpReduce));
    st.traffic[3].reserve(lane_count(g, Lane::kCp));
    st.traffic[4].reserve(lane_count(g, Lane::kEp));
    st.static_mem = stage_static_memory(prog_, pl.stage_of(r), cluster_);
  }
  if (!every_rank_ && topology_.nodes() > 1) {
    st.nic_copies = st.node_copies = 0;
    const int64_t node = topology_.node_of(r), nic = topology_.nic_of(r);
    for (int64_t q = node * cluster_.gpus_per_node; q < std::min(pl.world(), (node + 1) * cluster_.gpus_per_node); ++q) {
      if (replica_rank(pl, q) != r) continue;
      ++st.node_copies;
      st.nic_copies += topology_.nic_of(q) == nic;
    }
  }
  slot_of_[r] = static_cast<int32_t>(ranks_.size());
  ranks_.push_back(std::move(st));
}

// One-replica mode: a simulated rank's flows across nodes carry its NIC's replicas (nic_copies),
// but a node's uplink and downlink are shared by every rank of the node, replicas on other NICs
// included, which have no flows here. So the core links keep the share of their capacity those
// flows would get: capacity · Σ nic_copies / Σ (ranks of their nodes the simulated ranks stand
// for). Symmetric plans move the same bytes from every node, so one factor holds for all.
void Simulation::share_core_links() {
  int64_t carried = 0, stand_for = 0;
  for (const RankState& st : ranks_) {
    carried += st.nic_copies;
    stand_for += st.node_copies;
  }
  if (carried <= 0 || carried >= stand_for) return;
  const double share = static_cast<double>(carried) / static_cast<double>(stand_for);
  for (int64_t n = 0; n < topology_.nodes(); ++n) {
    for (const LinkId l : {topology_.uplink(n), topology_.downlink(n)}) net_.set_capacity_Bps(l, net_.capacity_Bps(l) * share);
  }
}

void Simulation::add_owner(FlowId id, const FlowOwner& owner) {
  if (static_cast<std::size_t>(id) == flow_owner_.size()) {
    flow_owner_.push_back(owner);
  } else {
    if (static_cast<std::size_t>(id) > flow_owner_.size()) flow_owner_.resize(static_cast<std::size_t>(id) + 1);
    flow_owner_[static_cast<std::size_t>(id)] = owner;
  }
}

// The contention-free time of a collective of `r` over its group's own placement (0 on a free network).
int64_t Simulation::collective_ns(RankState& r, const Instr& in) {
  if (options_.network == NetworkModel::kFree) return 0;
  GroupView& g = r.groups[static_cast<int>(in.group)];
  auto& [key, ns] = g.last[static_cast<std::size_t>(in.op)];
  const int64_t want = CostCache::memo_key(in.bytes, program::is_dp_group(in.group) ? prog_.collectives_of(in) : 1);
  if (key != want) {  // (keys are >= 0: the initial -1 never matches)
    key = want;
    ns = costs_.collective_ns(in, g.cost_group);
    // expert parallelism: the busiest rank receives ρ times the mean tokens (compute.hpp), and
    // gathers and scatters ρ times them over its experts' tensor-parallel group (the flex
    // dispatcher's all-to-alls likewise; the all-gather dispatcher's move every token whatever the routing)
    if ((in.group == Group::kEp || in.group == Group::kExpertTp || (in.group == Group::kExpertTpEp && in.op == Op::kAllToAll)) &&
        compute_.moe_imbalance() != 1.0) {
      ns = static_cast<int64_t>(std::ceil(static_cast<double>(ns) * compute_.moe_imbalance()));
    }
  }
  if (in.group == Group::kTp && !unit_kinds_.empty() && in.unit_begin >= 0 && !(in.flags & program::kFlagNormGrads) &&
      (in.op == Op::kTpAllGather || in.op == Op::kTpReduceScatter || in.op == Op::kTpAllReduce)) {
    // beside the GEMM TE or Megatron-LM overlaps it with (models/tp_overlap.hpp)
    const bool backward = (in.flags & program::kFlagGrad) != 0;
    return to_ns(tp_overlapped_s(compute_.tp_overlap(), unit_kinds_[static_cast<std::size_t>(in.unit_begin)], in.op, backward,
                                 static_cast<double>(ns) * 1e-9));
  }
  return ns;
}

// Collectives that take their time T without a flow: tensor-parallel ones (NVLink inside a
// node), the gradient norm (latency-bound), and every one when the network is not shared.
bool Simulation::timed_alone(const Instr& in) const {
  return in.lane == Lane::kTp || in.op == Op::kGradNormAllReduce || options_.network != NetworkModel::kShared;
}

// The slowdown per ns of overlap of a compute-lane instruction whose streaming share is `stream`
// beside a collective of HBM demand `hbm` (simulation.hpp): its SMs lost for the rest, its HBM
// rate for the streaming kernels.
double Simulation::beside_rate(double stream, double hbm) const {
  const double e = cluster_.gpu.memory_efficiency;
  const double hbm_slow = (hbm < e / 2 ? e / (e - hbm) : 2.0) - 1.0;
  return (1 - stream) * sm_share_ + stream * hbm_slow;
}

// A compute-lane instruction of `ns` starting at t, slowed where NCCL kernels of the rank's
// data-parallel collectives hold SMs and HBM bandwidth beside it (see simulation.hpp), plus the
// slowdown owed from collectives that started during the previous one.
int64_t Simulation::compute_ns(RankState& r, int64_t t, int64_t ns, double stream) {
  if (r.slow != 1) ns = std::llround(static_cast<double>(ns) * r.slow);
  if (!beside_) return ns;
  double extra = static_cast<double>(r.sm_debt_ns);
  r.sm_debt_ns = 0;
  for (const RankState::DpKernel& c : r.dp_comm) {
    const int64_t overlap = std::min(c.end_ns, t + ns) - std::max(c.begin_ns, t);
    if (overlap > 0) extra += static_cast<double>(overlap) * beside_rate(stream, c.hbm);
  }
  const int64_t total = ns + std::llround(extra);
  r.compute_begin_ns = t;
  r.compute_end_ns = t + total;
  r.compute_stream = stream;
  return total;
}

// A compute instruction's time from t: the compute model's, the framework's copies (in.bytes)
// streaming at the HBM rate too, slowed by NCCL beside it.
int64_t Simulation::compute_time_ns(RankState& r, const Instr& in, int64_t t) {
  const double copy_s = in.bytes > 0 ? compute_.hbm_copy_s(in.bytes) : 0.0;
  const double s = compute_.compute_s(in) + copy_s;
  const double stream = beside_ && s > 0 ? (compute_.compute_stream_s(in) + copy_s) / s : 0.0;
  return compute_ns(r, t, to_ns(s), stream);
}

// A chain whose first member starts at t (chains.hpp): each member starts at the latest end among
// its predecessors inside the chain (the others are done), in index order; the exits finish as
// events at their ends, the other members are done here. Every member's time is fixed (compute
// no data-parallel collective overlaps, collectives timed by T alone), so chains of one shape take
// the same times from their start: the first one's are kept and the others reuse them. What
// compute_ns leaves behind (the latest compute's interval, for the slowdown a collective starting
// during it owes) is then left as the shape's first run set it: by the overlap rule no
// data-parallel collective starts during a chained compute, so no one reads it for these.
void Simulation::run_chain(int32_t slot, int32_t first, int64_t t) {
  RankState& r = ranks_[static_cast<std::size_t>(slot)];
  const Chains& ch = *r.chains;
  const auto c = static_cast<std::size_t>(ch.of[static_cast<std::size_t>(first)]);
  const int32_t end = ch.end[c];
  RankState::ChainTiming& timing = r.timing[static_cast<std::size_t>(ch.shape[c])];
  if (!timing.known) {
    const program::RoleGraph& g = *r.graph;
    chain_start_.assign(static_cast<std::size_t>(end - first), 0);
    for (int32_t k = first; k < end; ++k) {
      const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
      const int64_t begin = chain_start_[static_cast<std::size_t>(k - first)];
      const int64_t done = begin + (in.lane == Lane::kCompute ? compute_time_ns(r, in, t + begin) : collective_ns(r, in));
      auto pass = [&](int32_t next) {
        if (next < end) {
          int64_t& s = chain_start_[static_cast<std::size_t>(next - first)];
          s = std::max(s, done);
        }
      };
      if (g.lane_next[k] >= 0) pass(g.lane_next[k]);
      for (int32_t i = g.succ_begin[k]; i < g.succ_begin[k + 1]; ++i) pass(g.succ[i]);
      if (ch.exit[static_cast<std::size_t>(k)]) timing.exits.emplace_back(k - first, done);
      timing.last = std::max(timing.last, done);
    }
    timing.known = true;
  }
  for (const auto& [offset, done] : timing.exits) schedule(t + done, slot, first + offset);
  const auto members = static_cast<int64_t>(end - first), exits = static_cast<int64_t>(timing.exits.size());
  r.finished += members - exits;
  finished_ += members - exits;
  for (int32_t k = first; k < end; ++k) r.done[static_cast<std::size_t>(k)] = 1;   // the exits' own finish sets it again
  r.last_end_ns = std::max(r.last_end_ns, t + timing.last);
}

void Simulation::start(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[static_cast<std::size_t>(slot)];
  if (r.chains != nullptr && r.chains->entry(k)) {
    run_chain(slot, k, t);
    return;
  }
  const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
  r.lane_start[static_cast<std::size_t>(in.lane)] = t;
  MemoryDelta d;
  if (usage_ && memory_rules_->at_start(in, d)) r.memory.change(t, d, r.role->first_id + k);
  switch (in.op) {
    case Op::kForward:
    case Op::kBackward:
    case Op::kBackwardInput:
    case Op::kBackwardWeight:
    case Op::kRecompute:
      schedule(t + compute_time_ns(r, in, t), slot, k);
      return;
    case Op::kOptimizerStep:
      if (in.flags & program::kFlagOnHost) {
        schedule(t + to_ns(compute_.optimizer_host_s(in.elems)), slot, k);
      } else {
        const double s = compute_.optimizer_gpu_s(in.elems);
        const double stream = beside_ && s > 0 ? compute_.optimizer_gpu_stream_s(in.elems) / s : 0.0;
        schedule(t + compute_ns(r, t, to_ns(s), stream), slot, k);
      }
      return;
    case Op::kOffloadCopy: schedule(t + to_ns(compute_.offload_copy_s(in.bytes)), slot, k); return;
    case Op::kReleaseParams: finish(slot, k, t); return;  // takes no time: done at once
    case Op::kSendActivation:
    case Op::kSendGrad: start_send(slot, k, t); return;
    case Op::kRecvActivation:
    case Op::kRecvGrad: start_recv(slot, k, t); return;
    default: arrive(slot, k, t); return;
  }
}

void Simulation::start_send(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[static_cast<std::size_t>(slot)];
  const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
  if (r.drain_ns > 0 && in.op == Op::kSendGrad && in.chunk == 0) r.drain_end_ns = std::max(r.drain_end_ns, t + r.drain_ns);
  const program::MessageKey key = program::message_of(prog_.placement, r.rank, in);
  Message& m = messages_[key];
  m.send_start_ns = t;
  if (options_.network != NetworkModel::kShared) {
    // its time alone on its route, known now: delivered then
    const int64_t end = t + (options_.network == NetworkModel::kFree ? 0 : costs_.p2p_ns(key.src, key.dst, in.bytes));
    schedule(end, slot, k);
    m.delivered = true;
    m.deliver_ns = end;
    if (m.waiting_slot >= 0) {
      ranks_[static_cast<std::size_t>(m.waiting_slot)].waited_ns[static_cast<std::size_t>(Lane::kPpRecv)] +=
          std::max<int64_t>(0, end - m.waiting_post_ns);
      schedule(std::max(end, m.waiting_post_ns), m.waiting_slot, m.waiting_instr);
    }
    return;
  }
  const int64_t latency = topology_.route_into(key.src, key.dst, path_);
  const int64_t copies = topology_.node_of(key.src) != topology_.node_of(key.dst) ? r.nic_copies : 1;
  const FlowId id = net_.start_flow(path_, in.bytes * copies, latency);
  add_owner(id, {FlowKind::kSend, slot, k, key});
}

void Simulation::start_recv(int32_t slot, int32_t k, int64_t t) {
  if (options_.alone) {   // its peer always ready: the message is there (the first, once the stages before made it)
    const RankState& r = ranks_[static_cast<std::size_t>(slot)];
    const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
    const bool first = in.op == Op::kRecvActivation && in.mb == 0 && in.chunk == 0;
    schedule(first ? std::max(t, r.fill_ns) : t, slot, k);
    return;
  }
  const RankState& r = ranks_[static_cast<std::size_t>(slot)];
  Message& m = messages_[program::message_of(prog_.placement, r.rank, r.role->instrs[static_cast<std::size_t>(k)])];
  if (m.delivered) {
    schedule(std::max(t, m.deliver_ns), slot, k);
  } else {
    m.waiting_slot = slot;
    m.waiting_instr = k;
    m.waiting_post_ns = t;
  }
}

// Folding. A collective timed by T alone, with no other simulated member, ends at t + T whatever
// else happens: nothing can delay it. It may then finish at once, stamped t + T, without a trip
// through the event queue, provided finishing it early changes nothing else. Its successors then
// start (or count down) early, so each must be
//   * made ready by it alone, and be a compute instruction or another such collective — those
//     only schedule their own end and change memory, and memory changes are kept in time order
//     (memory_accounting.hpp), so processing them early is exact; or
//   * kept waiting by one of those successors, which start at t + T, so it cannot start sooner.
// Anything that touches the network or another rank (p2p, dp collectives) is never started early.
// Tensor-parallel collectives are about two thirds of a Megatron plan's instructions.
[[gnu::always_inline]] inline bool Simulation::foldable(const RankState& r, int32_t k) const {
  const program::RoleGraph& g = *r.graph;
  // k's successors, each with how many of its predecessors are k (lane and dependencies)
  constexpr int kMax = 8;
  std::array<int32_t, kMax> succ{}, from_k{};
  std::array<bool, kMax> early{};  // made ready by k alone, and allowed to start early
  int m = 0;
  auto add = [&](int32_t s) {
    for (int i = 0; i < m; ++i) {
      if (succ[i] == s) {
        ++from_k[i];
        return true;
      }
    }
    if (m == kMax) return false;
    succ[m] = s;
    from_k[m++] = 1;
    return true;
  };
  if (g.lane_next[k] >= 0 && !add(g.lane_next[k])) return false;
  for (int32_t i = g.succ_begin[k]; i < g.succ_begin[k + 1]; ++i) {
    if (!add(g.succ[i])) return false;
  }
  for (int i = 0; i < m; ++i) {
    const bool kind_ok = g.early[static_cast<std::size_t>(succ[i])] != 0;
    if (r.waiting[succ[i]] == from_k[i] && !kind_ok) return false;  // would start early and must not
    early[i] = r.waiting[succ[i]] == from_k[i];
  }
  for (int i = 0; i < m; ++i) {
    if (early[i]) continue;
    // held back by another successor that starts at the fold's end: one it depends on (read off
    // that one's successors, in the graph, not off its own Instr)
    bool held = false;
    for (int j = 0; j < m && !held; ++j) {
      if (j == i || !early[j]) continue;
      for (int32_t s = g.succ_begin[succ[j]]; s < g.succ_begin[succ[j] + 1] && !held; ++s) held = g.succ[s] == succ[i];
    }
    if (!held) return false;
  }
  return true;
}

// A collective starts when every simulated member of its group has issued it.
void Simulation::arrive(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[static_cast<std::size_t>(slot)];
  const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
  GroupView& g = r.groups[static_cast<int>(in.group)];
  if (g.needed == 1) {  // the only simulated member: the others run in step with it
    ++g.issued;
    if (timed_alone(in)) {
      // timed by T alone (no flow): the most common instruction of a tensor-parallel plan
      r.lane_start[static_cast<std::size_t>(in.lane)] = t;
      const int64_t end = t + collective_ns(r, in);
      if (folding_ && !eager_ && foldable(r, k)) {
        finish(slot, k, end);
      } else {
        schedule(end, slot, k);
      }
      return;
    }
    const std::pair<int32_t, int32_t> self{slot, k};
    start_collective({&self, 1}, t);
    return;
  }
  const std::tuple<int, int64_t, int64_t> key{static_cast<int>(in.group), g.front, g.issued++};
  Arrival& a = arrivals_[key];
  a.members.emplace_back(slot, k);
  a.issued.push_back(t);
  a.latest = std::max(a.latest, t);
  if (static_cast<int32_t>(a.members.size()) < g.needed) return;
  for (std::size_t i = 0; i < a.members.size(); ++i) {
    ranks_[static_cast<std::size_t>(a.members[i].first)].waited_ns[static_cast<std::size_t>(in.lane)] += a.latest - a.issued[i];
  }
  start_collective(a.members, a.latest);
  arrivals_.erase(key);
}

void Simulation::start_collective(std::span<const std::pair<int32_t, int32_t>> members, int64_t t) {
  const auto [slot0, k0] = members.front();
  RankState& first = ranks_[static_cast<std::size_t>(slot0)];
  const Instr& in = first.role->instrs[static_cast<std::size_t>(k0)];
  for (const auto& [slot, k] : members) ranks_[static_cast<std::size_t>(slot)].lane_start[static_cast<std::size_t>(in.lane)] = t;
  const int64_t T = collective_ns(first, in);
  if (T == 0 || timed_alone(in)) {
    for (const auto& [slot, k] : members) schedule(t + T, slot, k);
    return;
  }
  const CollectiveKind kind = *collective_kind(in.op);
  if (beside_ && (in.lane == Lane::kDpGather || in.lane == Lane::kDpReduce)) {
    for (const auto& [slot, k] : members) {
      RankState& r = ranks_[static_cast<std::size_t>(slot)];
      const GroupView& g = r.groups[static_cast<int>(in.group)];
      // 3 bytes through HBM per bus byte, over the collective's contention-free time
      const double bus_bytes = static_cast<double>(in.bytes) * bus_bandwidth_factor(kind, g.ring.parts);
      const double hbm = 3 * bus_bytes / (static_cast<double>(T) * 1e-9 * cluster_.gpu.hbm_Bps);
      r.dp_comm[in.lane == Lane::kDpGather ? 0 : 1] = {t, t + T, hbm};
      // beside the compute already running: owed to the next compute-lane instruction
      const int64_t overlap = std::min(t + T, r.compute_end_ns) - std::max(t, r.compute_begin_ns);
      if (overlap > 0) r.sm_debt_ns += std::llround(static_cast<double>(overlap) * beside_rate(r.compute_stream, hbm));
    }
  }
  // One flow per simulated member towards its ring successor, capped to finish in T when alone.
  for (const auto& [slot, k] : members) {
    const RankState& r = ranks_[static_cast<std::size_t>(slot)];
    const GroupView& g = r.groups[static_cast<int>(in.group)];
    const double scale = in.lane == Lane::kEp ? costs_.flow_scale(in, g.cost_group) : 1.0;   // the flex dispatcher's wire
    const int64_t bytes = ring_flow_bytes(g.ring, kind, scale == 1.0 ? in.bytes : std::llround(static_cast<double>(in.bytes) * scale));
    const int64_t copies = topology_.node_of(g.ring.successor) != topology_.node_of(r.rank) ? r.nic_copies : 1;
    const FlowId id = net_.start_flow(g.route, bytes * copies, 0, ring_flow_cap_Bps(bytes * copies, T));
    add_owner(id, {FlowKind::kCollective, slot, k, {}});
  }
}

void Simulation::on_flow(const FlowCompletion& c) {
  const FlowOwner& o = flow_owner_[static_cast<std::size_t>(c.id)];
  queue_.push(c.time_ns, o.slot, o.instr);  // the collective member, or the send
  if (o.kind == FlowKind::kCollective) return;
  Message& m = messages_[o.message];
  m.delivered = true;
  m.deliver_ns = c.time_ns;
  if (m.waiting_slot >= 0) {
    ranks_[static_cast<std::size_t>(m.waiting_slot)].waited_ns[static_cast<std::size_t>(Lane::kPpRecv)] +=
        std::max<int64_t>(0, c.time_ns - m.waiting_post_ns);
    queue_.push(c.time_ns, m.waiting_slot, m.waiting_instr);
  }
}

// What a finished instruction held and kept busy: its memory change, its lane's busy interval.
[[gnu::always_inline]] inline void Simulation::account(RankState& r, const Instr& in, int32_t k, int64_t start_ns, int64_t t) {
  MemoryDelta delta;
  if (memory_rules_->at_end(in, delta)) r.memory.change(t, delta, r.role->first_id + k);
  if (in.lane == Lane::kCompute) {
    add_interval(r.compute, start_ns, t);
    return;
  }
  const program::Traffic traffic = program::traffic_of(in.lane, in.op);
  if (traffic == program::Traffic::kNone) return;
  int64_t begin = start_ns;
  // a receive is busy only once its message's send has begun
  if (program::is_recv(in.op)) begin = std::max(begin, messages_[program::message_of(prog_.placement, r.rank, in)].send_start_ns);
  add_interval(r.traffic[static_cast<std::size_t>(traffic) - 1], begin, t);
}

void Simulation::finish(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[static_cast<std::size_t>(slot)];
  const program::RoleGraph& d = *r.graph;
  const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
  ++r.finished;
  r.done[static_cast<std::size_t>(k)] = 1;
  r.last_end_ns = std::max(r.last_end_ns, t);
  const int64_t start_ns = r.lane_start[static_cast<std::size_t>(in.lane)];
  ++finished_;
  if (usage_) account(r, in, k, start_ns, t);
  if (options_.record_trace) {
    events_.push_back({r.rank, in.lane, in.op, r.role->first_id + k, start_ns, t, in.mb, r.role->stage, in.chunk, in.bytes,
                       in.flops});
  }
  // A chain's exit releases only the successors outside its chain (run_chain timed the others).
  const int32_t chain = r.chains != nullptr ? r.chains->of[static_cast<std::size_t>(k)] : -1;
  auto outside = [&](int32_t next) { return chain < 0 || r.chains->of[static_cast<std::size_t>(next)] != chain; };
  // Off the time-ordered queue the last predecessor to finish is the latest; eagerly completed
  // ones come in any order, so their latest end is kept.
  if (eager_) {
    if (t > options_.stop_after_ns) {
      stopped_ = true;
      return;
    }
    auto release = [&](int32_t next) {
      if (!outside(next)) return;
      int64_t& ready = r.ready[static_cast<std::size_t>(next)];
      ready = std::max(ready, t);
      if (--r.waiting[static_cast<std::size_t>(next)] == 0) start(slot, next, ready);
    };
    if (d.lane_next[k] >= 0) release(d.lane_next[k]);
    for (int32_t s = d.succ_begin[k]; s < d.succ_begin[k + 1]; ++s) release(d.succ[s]);
    return;
  }
  auto release = [&](int32_t next) {
    if (outside(next) && --r.waiting[static_cast<std::size_t>(next)] == 0) start(slot, next, t);
  };
  if (d.lane_next[k] >= 0) release(d.lane_next[k]);
  for (int32_t s = d.succ_begin[k]; s < d.succ_begin[k + 1]; ++s) release(d.succ[s]);
}

RunRecord Simulation::run() {
  queue_.reserve(1024);
  if (eager_) eager_stack_.reserve(1024);
  // the ready set first: starting an instruction may finish it at once and ready its successors
  std::vector<std::pair<int32_t, int32_t>> ready;
  for (int32_t slot = 0; slot < static_cast<int32_t>(ranks_.size()); ++slot) {
    for (int32_t k = 0; k < static_cast<int32_t>(ranks_[static_cast<std::size_t>(slot)].waiting.size()); ++k) {
      if (ranks_[static_cast<std::size_t>(slot)].waiting[static_cast<std::size_t>(k)] == 0) ready.emplace_back(slot, k);
    }
  }
  for (const auto& [slot, k] : ready) start(slot, k, 0);
  if (eager_) {
    while (!eager_stack_.empty() && !stopped_) {
      const Completion c = eager_stack_.back();
      eager_stack_.pop_back();
      finish(c.slot, c.instr, c.time_ns);
    }
  } else {
    run_events(
        queue_, net_, [this](const Event& e) { finish(e.a, e.b, e.time_ns); },
        [this](const FlowCompletion& c) { on_flow(c); });
  }
  RunRecord out;
  out.instructions = finished_;
  out.events = std::move(events_);
  for (RankState& r : ranks_) {
    if (!stopped_ && r.finished != static_cast<int64_t>(r.done.size())) {
      const auto never = std::find(r.done.begin(), r.done.end(), 0) - r.done.begin();
      throw SimError("simulation stalled: rank " + std::to_string(r.rank) + " instruction #" +
                     std::to_string(r.role->first_id + never) + " never ran");
    }
    RankRecord rec;
    rec.rank = r.rank;
    rec.last_end_ns = std::max(r.last_end_ns, r.drain_end_ns);
    rec.waited_ns = r.waited_ns;
    rec.compute = std::move(r.compute);
    rec.traffic = std::move(r.traffic);
    if (usage_) {
      bool first = true;
      r.memory.for_each_sample(r.rank, r.static_mem, [&](const trace::MemorySample& m) {
        if (first || m.total() > rec.peak.total()) rec.peak = m;
        first = false;
        if (options_.record_trace) rec.memory.push_back(m);
      });
    }
    out.ranks.push_back(std::move(rec));
  }
  return out;
}

}  // namespace stagecraft::sim
