#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <span>
#include <unordered_map>

#include "core/count/count.hpp"
#include "sim/engine/event_queue.hpp"
#include "sim/engine/intervals.hpp"
#include "sim/models/collectives.hpp"
#include "sim/models/compute.hpp"
#include "sim/models/memory.hpp"
#include "sim/network/flows.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::sim {

using program::Group;
using program::Instr;
using program::Lane;
using program::Op;
using program::Program;
using program::RoleProgram;

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

// A rank's view of one of its groups: who leads it, how many simulated members must arrive, and
// where its collective flow goes (the ring successor across the bottleneck stage).
struct GroupView {
  int64_t front = 0;
  int32_t needed = 0;
  int64_t successor = 0;
  int64_t steps = 0;      // ring steps on that path
  int64_t parts = 1;      // the buffer is cut into this many chunks
  int64_t issued = 0;     // collectives issued on this group so far
  std::vector<LinkId> route;  // links to the successor
};

struct MemoryChange {
  int64_t time_ns = 0;
  int64_t activations = 0;  // bytes added (negative: freed)
  int64_t gathered = 0;
  int32_t instr = -1;       // the Program instruction id that made the change
  bool frees() const { return activations + gathered < 0; }
  // (time, frees first): the order the peak is taken in
  bool before(const MemoryChange& o) const {
    return time_ns != o.time_ns ? time_ns < o.time_ns : (frees() && !o.frees());
  }
};

struct RankState {
  int64_t rank = 0;
  const RoleProgram* role = nullptr;
  const program::RoleGraph* graph = nullptr;
  std::vector<int16_t> waiting;
  // A lane runs one instruction at a time, so its start time is all the state it needs.
  std::array<int64_t, program::kLaneCount> lane_start{};
  int64_t finished = 0, last_end_ns = 0;
  std::vector<uint8_t> done;                              // per instruction: finished
  std::array<GroupView, 5> groups;                        // by program::Group
  std::vector<Interval> comm[3];                          // tp, pp, dp busy intervals
  std::vector<Interval> compute;                          // compute lane busy intervals, in order
  trace::MemoryBytes static_mem;   // what the rank holds for the whole step
  // Memory changes by their simulated time, frees before allocations at equal times, so the peak
  // does not depend on the order in which simultaneous (or folded) instructions are processed.
  std::vector<MemoryChange> memory_changes;
  std::vector<trace::MemorySample> samples;   // replay_memory: in time order
};

struct Message {
  bool delivered = false;
  int64_t send_start_ns = 0;
  int64_t deliver_ns = 0;
  int32_t waiting_slot = -1, waiting_instr = -1;
  int64_t recv_post_ns = 0;
};

struct Arrival {
  std::vector<std::pair<int32_t, int32_t>> members;   // (slot, instr)
};

enum class FlowKind { kSend, kCollective };
struct FlowOwner {
  FlowKind kind;
  int32_t slot;
  int32_t instr;
  uint64_t message;
  int64_t started_ns;
};

class Simulation {
 public:
  Simulation(const Program& prog, const spec::Cluster& cluster, const SimOptions& options);
  SimResult run();

 private:
  void start(int32_t slot, int32_t k, int64_t t);
  void finish(int32_t slot, int32_t k, int64_t t);
  void start_send(int32_t slot, int32_t k, int64_t t);
  void start_recv(int32_t slot, int32_t k, int64_t t);
  void arrive(int32_t slot, int32_t k, int64_t t);
  bool foldable(const RankState& r, int32_t k) const;
  void start_collective(std::span<const std::pair<int32_t, int32_t>> members, int64_t t);
  void on_flow(const FlowCompletion& c);
  int64_t collective_ns(const Instr& in, int64_t rank);
  GroupView view(Group g, int64_t rank) const;
  uint64_t message_key(int64_t src, int64_t dst, bool grad, int32_t mb, int32_t src_chunk) const;
  void memory_at_start(RankState& r, int32_t k, int64_t t);
  void memory_at_end(RankState& r, int32_t k, int64_t t);
  void note_memory(RankState& r, int64_t t, int64_t activations, int64_t gathered, int32_t instr);
  void replay_memory(RankState& r);
  int comm_class(const Instr& in) const;
  void summarize(SimResult& out);

  const Program& prog_;
  const spec::Cluster& cluster_;
  SimOptions options_;
  Topology topology_;
  FlowNetwork net_;
  ComputeModel compute_;
  std::vector<program::RoleGraph> graphs_;               // for lists lower() built no graph for
  std::vector<RankState> ranks_;
  std::unordered_map<int64_t, int32_t> slot_of_;
  EventQueue queue_;
  std::unordered_map<uint64_t, Message> messages_;
  std::map<std::tuple<int, int64_t, int64_t>, Arrival> arrivals_;
  std::vector<FlowOwner> flow_owner_;                    // by FlowId (ids count up from 0)
  void add_owner(FlowId id, const FlowOwner& owner) {
    if (static_cast<std::size_t>(id) == flow_owner_.size()) {
      flow_owner_.push_back(owner);
    } else {
      if (static_cast<std::size_t>(id) > flow_owner_.size()) flow_owner_.resize(static_cast<std::size_t>(id) + 1);
      flow_owner_[static_cast<std::size_t>(id)] = owner;
    }
  }
  // (op, group kind) -> its collective's cost model and the last sizes asked for (sizes repeat)
  struct CachedCost {
    std::optional<CollectiveCost> cost;
    std::array<int64_t, 8> bytes{-1, -1, -1, -1, -1, -1, -1, -1};  // a few recent sizes: buckets alternate
    std::array<int64_t, 8> ns{};
    uint32_t next = 0;                                             // the slot to overwrite next
    uint32_t last = 0;                                             // the slot that answered last
  };
  std::array<CachedCost, program::kOpCount * 5> coll_cost_;
  std::vector<double> act_prefix_, act_full_prefix_;      // activation bytes per token, prefix over units
  std::vector<LinkId> path_;
  trace::Trace trace_;
  int64_t events_ = 0;
  bool full_recompute_ = false;
  bool zero_bubble_ = false;   // activations are freed by BackwardWeight
  double tokens_ = 0;          // per micro-batch
};

Simulation::Simulation(const Program& prog, const spec::Cluster& cluster, const SimOptions& options)
    : prog_(prog),
      cluster_(cluster),
      options_(options),
      topology_(cluster, prog.placement.world()),
      net_(topology_),
      compute_(prog.model, cluster, prog.training, prog.plan) {
  graphs_.resize(prog.roles.size());
  const program::Placement& pl = prog.placement;
  std::vector<int64_t> sim_ranks;
  if (options.full) {
    for (int64_t r = 0; r < pl.world(); ++r) sim_ranks.push_back(r);
  } else {
    for (int64_t s = 0; s < pl.pp; ++s) sim_ranks.push_back(pl.rank(s, 0, 0));
  }
  full_recompute_ = prog.plan.recompute == spec::Recompute::kFull;
  zero_bubble_ = prog.plan.schedule == spec::Schedule::kZbH1;
  tokens_ = static_cast<double>(prog.tokens_per_micro_batch());
  const std::vector<program::Unit> units = program::model_units(prog.model, prog.plan.tp);
  act_prefix_.assign(units.size() + 1, 0);
  act_full_prefix_.assign(units.size() + 1, 0);
  for (std::size_t u = 0; u < units.size(); ++u) {
    act_prefix_[u + 1] = act_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan,
                                                                      prog.training.dtype, prog.plan.recompute);
    act_full_prefix_[u + 1] = act_full_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan,
                                                                                prog.training.dtype, spec::Recompute::kNone);
  }
  const spec::ZeroConfig& z = prog.plan.zero;
  std::size_t flows = 0;
  for (int64_t r : sim_ranks) {
    RankState st;
    st.rank = r;
    const auto role = static_cast<std::size_t>(prog.rank_role[r]);
    st.role = &prog.roles[role];
    st.graph = &program::graph_of(prog.roles[role], graphs_[role]);
    st.waiting = st.graph->preds;
    st.done.assign(st.waiting.size(), 0);
    // at most one flow per p2p send and per dp collective of the rank
    flows += st.graph->lane_count[static_cast<int>(Lane::kPpSend)] + st.graph->lane_count[static_cast<int>(Lane::kDpGather)] +
             st.graph->lane_count[static_cast<int>(Lane::kDpReduce)];
    st.memory_changes.reserve(static_cast<std::size_t>(st.graph->lane_count[static_cast<int>(Lane::kCompute)] +
                                                       st.graph->lane_count[static_cast<int>(Lane::kDpGather)]));
    st.compute.reserve(static_cast<std::size_t>(st.graph->lane_count[static_cast<int>(Lane::kCompute)]));
    st.comm[0].reserve(static_cast<std::size_t>(st.graph->lane_count[static_cast<int>(Lane::kTp)]));
    st.comm[1].reserve(static_cast<std::size_t>(st.graph->lane_count[static_cast<int>(Lane::kPpSend)] +
                                                st.graph->lane_count[static_cast<int>(Lane::kPpRecv)]));
    st.comm[2].reserve(static_cast<std::size_t>(st.graph->lane_count[static_cast<int>(Lane::kDpGather)] +
                                                st.graph->lane_count[static_cast<int>(Lane::kDpReduce)]));
    const int64_t stage = pl.stage_of(r);
    int64_t stage_params = 0, persistent = 0;
    for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) stage_params += prog.chunk(stage, c).params;
    for (const program::Bucket& b : prog.param_buckets) {
      if (b.stage == stage && z.stage == 3) persistent += b.persistent_elems;
    }
    const ModelStates ms = model_states(stage_params, persistent, z, pl.dp, prog.training.dtype);
    st.static_mem[trace::MemoryKind::kParams] = ms.params;
    st.static_mem[trace::MemoryKind::kGrads] = ms.grads;
    st.static_mem[trace::MemoryKind::kOptimizer] = ms.optimizer;
    st.static_mem[trace::MemoryKind::kReserved] = cluster.gpu.reserved_bytes;
    int64_t buffers = 0;
    if (pl.pp > 1) {
      const int64_t act = prog.tokens_per_micro_batch() * prog.model.hidden * prog.activation_bytes;
      buffers += 2 * (prog.plan.sequence_parallel ? act / prog.plan.tp : act);  // send + receive buffer
    }
    if (z.stage >= 2 && pl.dp > 1) buffers += std::min(z.reduce_bucket, stage_params) * prog.param_bytes;
    st.static_mem[trace::MemoryKind::kBuffers] = buffers;
    slot_of_[r] = static_cast<int32_t>(ranks_.size());
    ranks_.push_back(std::move(st));
  }
  flow_owner_.reserve(flows);
  for (RankState& st : ranks_) {
    for (Group g : {Group::kTp, Group::kDp, Group::kEmbedding, Group::kWorld}) {
      GroupView& v = st.groups[static_cast<int>(g)];
      v = view(g, st.rank);
      topology_.route_into(st.rank, v.successor, v.route);
    }
  }
}

GroupView Simulation::view(Group g, int64_t rank) const {
  const std::vector<int64_t> group = prog_.placement.group_members(g, rank);
  GroupView v;
  v.front = group.front();
  for (int64_t m : group) v.needed += slot_of_.count(m) ? 1 : 0;
  const int64_t n = static_cast<int64_t>(group.size());
  const int64_t me = std::find(group.begin(), group.end(), rank) - group.begin();
  int64_t nodes = 1;
  for (int64_t i = 1; i < n; ++i) nodes += group[i] / cluster_.gpus_per_node != group[i - 1] / cluster_.gpus_per_node;
  v.parts = n;
  if (nodes > 1) {
    // hierarchical: the inter-node ring of this member's rail is the bottleneck stage
    v.successor = group[(me + n / nodes) % n];
    v.steps = nodes - 1;
  } else {
    v.successor = group[(me + 1) % n];
    v.steps = n - 1;
  }
  return v;
}

uint64_t Simulation::message_key(int64_t src, int64_t dst, bool grad, int32_t mb, int32_t src_chunk) const {
  return (static_cast<uint64_t>(src) << 44) ^ (static_cast<uint64_t>(dst) << 24) ^
         (static_cast<uint64_t>(grad) << 23) ^ (static_cast<uint64_t>(mb) << 8) ^ static_cast<uint64_t>(src_chunk);
}

int Simulation::comm_class(const Instr& in) const {
  switch (in.lane) {
    case Lane::kTp: return 0;
    case Lane::kPpSend:
    case Lane::kPpRecv: return 1;
    case Lane::kDpGather:
    case Lane::kDpReduce: return in.op == Op::kReleaseParams ? -1 : 2;
    default: return -1;
  }
}

// Inserted in (time, allocation after free) order; a change processed early (a folded
// instruction's successor) moves back past the few changes it precedes.
void Simulation::note_memory(RankState& r, int64_t t, int64_t activations, int64_t gathered, int32_t instr) {
  const MemoryChange c{t, activations, gathered, instr};
  std::vector<MemoryChange>& v = r.memory_changes;
  v.push_back(c);
  std::size_t i = v.size() - 1;
  while (i > 0 && c.before(v[i - 1])) {
    v[i] = v[i - 1];
    --i;
  }
  v[i] = c;
}

// The running totals in time order, one sample per change (the first: the step's start), from
// which the peak and its breakdown are read.
void Simulation::replay_memory(RankState& r) {
  trace::MemorySample m{r.rank, 0, -1, r.static_mem};
  r.samples.reserve(r.memory_changes.size() + 1);
  r.samples.push_back(m);
  for (const MemoryChange& c : r.memory_changes) {
    m.time_ns = c.time_ns;
    m.instr = c.instr;
    m.bytes[trace::MemoryKind::kActivations] += c.activations;
    m.bytes[trace::MemoryKind::kBuffers] += c.gathered;
    r.samples.push_back(m);
  }
}

void Simulation::memory_at_start(RankState& r, int32_t k, int64_t t) {
  const Instr& in = r.role->instrs[k];
  const int32_t id = r.role->first_id + k;
  const double tokens = tokens_;
  switch (in.op) {
    case Op::kForward:
      note_memory(r, t, static_cast<int64_t>(tokens * (act_prefix_[in.unit_end] - act_prefix_[in.unit_begin])), 0, id);
      return;
    case Op::kRecompute:
      note_memory(r, t, static_cast<int64_t>(tokens * (act_full_prefix_[in.unit_end] - act_full_prefix_[in.unit_begin])), 0,
                  id);
      return;
    case Op::kGatherParams: note_memory(r, t, 0, in.bytes, id); return;
    default: return;
  }
}

void Simulation::memory_at_end(RankState& r, int32_t k, int64_t t) {
  const Instr& in = r.role->instrs[k];
  const int32_t id = r.role->first_id + k;
  const double tokens = tokens_;
  if ((in.op == Op::kBackward && !zero_bubble_) || in.op == Op::kBackwardWeight) {
    double bytes = act_prefix_[in.unit_end] - act_prefix_[in.unit_begin];
    if (full_recompute_) {
      // what Recompute re-created for these units (blocks only; embedding and head are not recomputed)
      const int32_t head = program::head_unit(prog_.model);
      const int32_t b = std::max(in.unit_begin, 1), e = std::min(in.unit_end, head);
      if (b < e) bytes += act_full_prefix_[e] - act_full_prefix_[b];
    }
    note_memory(r, t, -static_cast<int64_t>(tokens * bytes), 0, id);
  } else if (in.op == Op::kReleaseParams) {
    note_memory(r, t, 0, -in.elems * prog_.param_bytes, id);
  }
}

// The contention-free time of a collective over its group's placement. Groups of one kind have
// the same shape on every rank (the placement is regular), so the size-independent part is built
// once per (op, group kind).
int64_t Simulation::collective_ns(const Instr& in, int64_t rank) {
  if (in.op == Op::kGradNormAllReduce) {
    return gradnorm_allreduce_ns(prog_.placement.world(), cluster_.gpus_per_node, topology_.intra_latency_ns(),
                                 topology_.inter_latency_ns());
  }
  // by (op, group): the op decides the collective kind
  CachedCost& c = coll_cost_[static_cast<std::size_t>(static_cast<int>(in.op) * 5 + static_cast<int>(in.group))];
  if (c.bytes[c.last] == in.bytes) return c.ns[c.last];  // the size asked for last (bytes ≥ 0, so never an empty slot)
  if (!c.cost) {
    const std::vector<int64_t> members = prog_.placement.group_members(in.group, rank);
    c.cost.emplace(*collective_kind(in.op), members, topology_);
  }
  for (std::size_t i = 0; i < c.bytes.size(); ++i) {
    if (c.bytes[i] == in.bytes) {
      c.last = static_cast<uint32_t>(i);
      return c.ns[i];
    }
  }
  const std::size_t slot = c.next++ % c.bytes.size();
  c.bytes[slot] = in.bytes;
  c.ns[slot] = c.cost->time_ns(in.bytes);
  c.last = static_cast<uint32_t>(slot);
  return c.ns[slot];
}

void Simulation::start(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[slot];
  const Instr& in = r.role->instrs[k];
  r.lane_start[static_cast<std::size_t>(in.lane)] = t;
  memory_at_start(r, k, t);
  switch (in.op) {
    case Op::kForward:
    case Op::kBackward:
    case Op::kBackwardInput:
    case Op::kBackwardWeight:
    case Op::kRecompute:
      queue_.push(t + to_ns(compute_.compute_s(in.op, in.unit_begin, in.unit_end)), slot, k);
      return;
    case Op::kOptimizerStep:
      queue_.push(t + to_ns((in.flags & program::kFlagOnHost) ? compute_.optimizer_host_s(in.elems)
                                                              : compute_.optimizer_gpu_s(in.elems)),
                  slot, k);
      return;
    case Op::kOffloadCopy: queue_.push(t + to_ns(compute_.offload_copy_s(in.bytes)), slot, k); return;
    case Op::kReleaseParams: finish(slot, k, t); return;  // takes no time: done at once
    case Op::kSendActivation:
    case Op::kSendGrad: start_send(slot, k, t); return;
    case Op::kRecvActivation:
    case Op::kRecvGrad: start_recv(slot, k, t); return;
    default: arrive(slot, k, t); return;
  }
}

void Simulation::start_send(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[slot];
  const Instr& in = r.role->instrs[k];
  const program::Placement& pl = prog_.placement;
  const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(r.rank), pl.tp_index_of(r.rank));
  const uint64_t key = message_key(r.rank, peer, in.op == Op::kSendGrad, in.mb, in.chunk);
  messages_[key].send_start_ns = t;
  if (options_.free_communication) {
    queue_.push(t, slot, k);
    Message& m = messages_[key];
    m.delivered = true;
    m.deliver_ns = t;
    if (m.waiting_slot >= 0) queue_.push(t, m.waiting_slot, m.waiting_instr);
    return;
  }
  const int64_t latency = topology_.route_into(r.rank, peer, path_);
  const FlowId id = net_.start_flow(path_, in.bytes, latency);
  add_owner(id, {FlowKind::kSend, slot, k, key, t});
}

void Simulation::start_recv(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[slot];
  const Instr& in = r.role->instrs[k];
  const program::Placement& pl = prog_.placement;
  const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(r.rank), pl.tp_index_of(r.rank));
  Message& m = messages_[message_key(peer, r.rank, in.op == Op::kRecvGrad, in.mb, in.peer_chunk)];
  m.recv_post_ns = t;
  if (m.delivered) {
    queue_.push(t, slot, k);
  } else {
    m.waiting_slot = slot;
    m.waiting_instr = k;
  }
}

// Folding. A collective timed by T alone, with no other simulated member, ends at t + T whatever
// else happens: nothing can delay it. It may then finish at once, stamped t + T, without a trip
// through the event queue, provided finishing it early changes nothing else. Its successors then
// start (or count down) early, so each must be
//   * made ready by it alone, and be a compute instruction or another such collective — those
//     only schedule their own end and change memory, and memory changes are kept in time order
//     (note_memory), so processing them early is exact; or
//   * kept waiting by one of those successors, which start at t + T, so it cannot start sooner.
// Anything that touches the network or another rank (p2p, dp collectives) is never started early.
// Tensor-parallel collectives are about two thirds of a Megatron plan's instructions.
bool Simulation::foldable(const RankState& r, int32_t k) const {
  const program::RoleGraph& g = *r.graph;
  const Instr* instrs = r.role->instrs.data();
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
    const Instr& in = instrs[succ[i]];
    const bool kind_ok = program::is_compute(in.op) || (in.lane == Lane::kTp && program::is_collective(in.op));
    if (r.waiting[succ[i]] == from_k[i] && !kind_ok) return false;  // would start early and must not
    early[i] = r.waiting[succ[i]] == from_k[i];
  }
  for (int i = 0; i < m; ++i) {
    if (early[i]) continue;
    bool held = false;  // held back by another successor that starts at the fold's end
    for (int32_t d : r.role->deps_of(instrs[succ[i]])) {
      for (int j = 0; j < m && !held; ++j) held = j != i && early[j] && succ[j] == d;
    }
    if (!held) return false;
  }
  return true;
}

// A collective starts when every simulated member of its group has issued it.
void Simulation::arrive(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[slot];
  const Instr& in = r.role->instrs[k];
  GroupView& g = r.groups[static_cast<int>(in.group)];
  if (g.needed == 1) {  // the only simulated member: the others run in step with it
    ++g.issued;
    if (in.lane == Lane::kTp || in.op == Op::kGradNormAllReduce || options_.free_communication) {
      // timed by T alone (no flow): the most common instruction of a tensor-parallel plan
      r.lane_start[static_cast<std::size_t>(in.lane)] = t;
      const int64_t end = t + (options_.free_communication ? 0 : collective_ns(in, r.rank));
      if (foldable(r, k)) {
        finish(slot, k, end);
      } else {
        queue_.push(end, slot, k);
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
  if (static_cast<int32_t>(a.members.size()) < g.needed) return;
  start_collective(a.members, t);
  arrivals_.erase(key);
}

void Simulation::start_collective(std::span<const std::pair<int32_t, int32_t>> members, int64_t t) {
  const auto [slot0, k0] = members.front();
  const Instr& in = ranks_[slot0].role->instrs[k0];
  for (const auto& [slot, k] : members) ranks_[slot].lane_start[static_cast<std::size_t>(in.lane)] = t;
  const int64_t T = options_.free_communication ? 0 : collective_ns(in, ranks_[slot0].rank);
  if (T == 0 || in.lane == Lane::kTp || in.op == Op::kGradNormAllReduce) {
    for (const auto& [slot, k] : members) queue_.push(t + T, slot, k);
    return;
  }
  // One flow per simulated member towards its ring successor, capped to finish in T when alone.
  for (const auto& [slot, k] : members) {
    const RankState& r = ranks_[slot];
    const GroupView& g = r.groups[static_cast<int>(in.group)];
    int64_t bytes = g.steps * ((in.bytes + g.parts - 1) / g.parts);
    if (in.op == Op::kAllReduceGrads) bytes *= 2;
    const double cap = static_cast<double>(bytes) * 1e9 / static_cast<double>(T);
    const FlowId id = net_.start_flow(g.route, bytes, 0, cap);
    add_owner(id, {FlowKind::kCollective, slot, k, 0, t});
  }
}

void Simulation::on_flow(const FlowCompletion& c) {
  const FlowOwner& o = flow_owner_[static_cast<std::size_t>(c.id)];
  if (o.kind == FlowKind::kCollective) {
    queue_.push(c.time_ns, o.slot, o.instr);
    return;
  }
  queue_.push(c.time_ns, o.slot, o.instr);  // the send
  Message& m = messages_[o.message];
  m.delivered = true;
  m.deliver_ns = c.time_ns;
  if (m.waiting_slot >= 0) queue_.push(c.time_ns, m.waiting_slot, m.waiting_instr);
}

void Simulation::finish(int32_t slot, int32_t k, int64_t t) {
  RankState& r = ranks_[slot];
  const program::RoleGraph& d = *r.graph;
  const Instr& in = r.role->instrs[k];
  ++r.finished;
  r.done[k] = 1;
  r.last_end_ns = std::max(r.last_end_ns, t);
  const int64_t start_ns = r.lane_start[static_cast<std::size_t>(in.lane)];
  ++events_;
  memory_at_end(r, k, t);
  if (in.lane == Lane::kCompute) add_interval(r.compute, start_ns, t);
  const int cls = comm_class(in);
  if (cls >= 0) {
    int64_t begin = start_ns;
    if (program::is_recv(in.op)) {
      const program::Placement& pl = prog_.placement;
      const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(r.rank), pl.tp_index_of(r.rank));
      begin = std::max(begin, messages_[message_key(peer, r.rank, in.op == Op::kRecvGrad, in.mb, in.peer_chunk)].send_start_ns);
    }
    add_interval(r.comm[cls], begin, t);
  }
  if (options_.record_trace) {
    trace_.events.push_back({r.rank, in.lane, in.op, r.role->first_id + k, start_ns, t, in.mb, r.role->stage,
                             in.chunk, in.bytes, in.flops});
  }
  auto release = [&](int32_t next) {
    if (--r.waiting[next] == 0) start(slot, next, t);
  };
  if (d.lane_next[k] >= 0) release(d.lane_next[k]);
  for (int32_t s = d.succ_begin[k]; s < d.succ_begin[k + 1]; ++s) release(d.succ[s]);
}

SimResult Simulation::run() {
  queue_.reserve(1024);
  for (int32_t slot = 0; slot < static_cast<int32_t>(ranks_.size()); ++slot) {
  }
  // the ready set first: starting an instruction may finish it at once and ready its successors
  std::vector<std::pair<int32_t, int32_t>> ready;
  for (int32_t slot = 0; slot < static_cast<int32_t>(ranks_.size()); ++slot) {
    for (int32_t k = 0; k < static_cast<int32_t>(ranks_[slot].waiting.size()); ++k) {
      if (ranks_[slot].waiting[k] == 0) ready.emplace_back(slot, k);
    }
  }
  for (const auto& [slot, k] : ready) start(slot, k, 0);
  while (true) {
    const int64_t tq = queue_.empty() ? kNeverNs : queue_.next_time_ns();
    const int64_t tn = net_.next_event_time_ns();
    if (tq == kNeverNs && tn == kNeverNs) break;
    // on_flow only queues events, so the completions can be read in place
    if (tn < tq) {
      for (const FlowCompletion& c : net_.advance_to(tn)) on_flow(c);
      continue;
    }
    if (net_.now_ns() < tq) {
      for (const FlowCompletion& c : net_.advance_to(tq)) on_flow(c);
    }
    const Event e = queue_.pop();
    finish(e.a, e.b, e.time_ns);
  }
  for (const RankState& r : ranks_) {
    if (r.finished == static_cast<int64_t>(r.done.size())) continue;
    const auto never = std::find(r.done.begin(), r.done.end(), 0) - r.done.begin();
    throw std::logic_error("simulation stalled: rank " + std::to_string(r.rank) + " instruction #" +
                           std::to_string(r.role->first_id + never) + " never ran");
  }
  SimResult out;
  summarize(out);
  return out;
}

void Simulation::summarize(SimResult& result) {
  Metrics& out = result.metrics;
  int64_t step_ns = 0;
  for (const RankState& r : ranks_) {
    step_ns = std::max(step_ns, r.last_end_ns);
  }
  const double step = static_cast<double>(step_ns) * 1e-9;
  out.step_time_s = step;
  out.simulated_ranks = static_cast<int64_t>(ranks_.size());
  out.events = events_;
  double compute = 0, exposed = 0, comm_lane[3] = {0, 0, 0};
  const trace::MemorySample* peak = nullptr;
  for (RankState& r : ranks_) {
    std::vector<Interval> comm_union;
    const std::vector<Interval> compute_union = union_of(std::move(r.compute));
    for (int c = 0; c < 3; ++c) {
      const std::vector<Interval> lane = union_of(std::move(r.comm[c]));
      comm_lane[c] += static_cast<double>(length(lane));
      comm_union = unite(comm_union, lane);
    }
    // exposed = |comm| − |comm ∩ compute|: communication the compute lane does not hide
    const int64_t compute_ns = length(compute_union);
    exposed += static_cast<double>(length(comm_union) - overlap(comm_union, compute_union));
    compute += static_cast<double>(compute_ns);
    replay_memory(r);
    const trace::MemorySample* p = trace::peak_sample(r.samples);
    if (!peak || p->total() > peak->total()) peak = p;
  }
  out.peak_memory_bytes = peak->total();
  out.peak_rank = peak->rank;
  out.memory = peak->bytes;
  const double n = static_cast<double>(ranks_.size());
  out.time.compute_s = compute / n * 1e-9;
  out.time.exposed_comm_s = exposed / n * 1e-9;
  out.time.bubble_s = std::max(0.0, step - out.time.compute_s - out.time.exposed_comm_s);
  out.time.tp_s = comm_lane[0] / n * 1e-9;
  out.time.pp_s = comm_lane[1] / n * 1e-9;
  out.time.dp_s = comm_lane[2] / n * 1e-9;
  out.bubble_fraction = step > 0 ? out.time.bubble_s / step : 0;

  const double tokens = static_cast<double>(prog_.training.global_batch * prog_.model.seq_len);
  const double world = static_cast<double>(prog_.placement.world());
  out.tokens_per_s = step > 0 ? tokens / step : 0;
  out.model_tflops_per_gpu = step > 0 ? tokens * count::model_flops_per_token_train(prog_.model) / (world * step) / 1e12 : 0;
  out.hardware_tflops_per_gpu =
      step > 0 ? tokens * count::hardware_flops_per_token_train(prog_.model, prog_.plan.recompute) / (world * step) / 1e12 : 0;
  out.mfu = out.model_tflops_per_gpu * 1e12 / compute_.peak_flops();
  out.capacity_bytes = cluster_.gpu.memory_bytes;
  out.fits = out.peak_memory_bytes <= out.capacity_bytes;
  if (options_.record_trace) {
    result.trace = std::move(trace_);
    for (RankState& r : ranks_) result.trace.memory.insert(result.trace.memory.end(), r.samples.begin(), r.samples.end());
    result.trace.source = "simulated";
    result.trace.plan = spec::to_json(prog_.plan);
    result.trace.model = spec::to_json(prog_.model);
    result.trace.cluster = spec::to_json(cluster_);
  }
}

}  // namespace

SimResult simulate(const Program& prog, const spec::Cluster& cluster, const SimOptions& options) {
  if (cluster.gpus() < prog.placement.world()) {
    throw std::invalid_argument("cluster " + cluster.name + " has " + std::to_string(cluster.gpus()) +
                                " GPUs; the plan needs " + std::to_string(prog.placement.world()));
  }
  return Simulation(prog, cluster, options).run();
}


}  // namespace stagecraft::sim
