#include "planner/critical_path.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "sim/models/collectives.hpp"
#include "sim/models/compute.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::planner {

using program::Group;
using program::Instr;
using program::Op;
using program::Program;
using program::RoleProgram;

namespace {

int64_t to_ns(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

int64_t log2ceil(int64_t n) {
  int64_t k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

sim::CollectiveKind kind_of(Op op) {
  switch (op) {
    case Op::kGatherParams:
    case Op::kAllGatherParams:
    case Op::kTpAllGather: return sim::CollectiveKind::kAllGather;
    case Op::kReduceScatterGrads:
    case Op::kTpReduceScatter: return sim::CollectiveKind::kReduceScatter;
    default: return sim::CollectiveKind::kAllReduce;
  }
}

using program::RoleGraph;

class Replay {
 public:
  Replay(const Program& prog, const spec::Cluster& cluster);
  int64_t run();

 private:
  struct Rank {
    int64_t rank = 0;
    const RoleProgram* role = nullptr;
    const RoleGraph* graph = nullptr;
    std::vector<int16_t> waiting;
    std::vector<int64_t> ready;        // max end of the predecessors so far
    std::array<int64_t, 5> issued{};   // collectives issued per group kind
    std::array<int, 5> needed{};       // simulated members of its group, per group kind
  };
  struct Message {
    int64_t send_start = -1;
    int32_t parked_slot = -1, parked_instr = -1;
    int64_t parked_ready = 0;
  };
  struct Gathering {
    std::vector<std::pair<int32_t, int32_t>> members;
    int64_t latest = 0;
  };

  void start(int32_t slot, int32_t k, int64_t t);
  void end(int32_t slot, int32_t k, int64_t t);
  int64_t duration(const Instr& in);
  int64_t p2p_ns(int64_t src, int64_t dst, int64_t bytes);
  uint64_t message_key(int64_t src, int64_t dst, bool grad, int32_t mb, int32_t chunk) const {
    return (static_cast<uint64_t>(src) << 44) ^ (static_cast<uint64_t>(dst) << 24) ^ (static_cast<uint64_t>(grad) << 23) ^
           (static_cast<uint64_t>(mb) << 8) ^ static_cast<uint64_t>(chunk);
  }
  int needed(Group g, int64_t rank) const;

  const Program& prog_;
  const spec::Cluster& cluster_;
  sim::Topology topology_;
  sim::ComputeModel compute_;
  std::vector<RoleGraph> graphs_;               // scratch for lists lower() did not build a graph for
  std::vector<const RoleGraph*> graph_ptrs_;
  std::vector<Rank> ranks_;
  std::unordered_map<int64_t, int32_t> slot_of_;
  std::vector<std::pair<int32_t, int32_t>> work_;
  std::unordered_map<uint64_t, Message> messages_;
  std::map<std::tuple<int, int64_t, int64_t>, Gathering> gatherings_;
  // (collective kind, group kind) -> the cost models of the distinct placements
  std::map<std::pair<int, int>, std::vector<sim::CollectiveCost>> costs_;
  std::map<std::pair<int64_t, int64_t>, sim::CollectiveCost> p2p_;
  int64_t finish_ = 0;
};

Replay::Replay(const Program& prog, const spec::Cluster& cluster)
    : prog_(prog),
      cluster_(cluster),
      topology_(cluster, prog.placement.world()),
      compute_(prog.model, cluster, prog.training, prog.plan) {
  graphs_.resize(prog.roles.size());
  for (std::size_t i = 0; i < prog.roles.size(); ++i) graph_ptrs_.push_back(&program::graph_of(prog.roles[i], graphs_[i]));
  const program::Placement& pl = prog.placement;
  for (int64_t s = 0; s < pl.pp; ++s) {
    Rank r;
    r.rank = pl.rank(s, 0, 0);
    const int32_t role = prog.rank_role[static_cast<std::size_t>(r.rank)];
    r.role = &prog.roles[static_cast<std::size_t>(role)];
    r.graph = graph_ptrs_[static_cast<std::size_t>(role)];
    r.waiting = r.graph->preds;
    r.ready.assign(r.waiting.size(), 0);
    slot_of_[r.rank] = static_cast<int32_t>(ranks_.size());
    ranks_.push_back(std::move(r));
  }
  for (Rank& r : ranks_) {
    for (Group g : {Group::kNone, Group::kTp, Group::kDp, Group::kEmbedding, Group::kWorld}) {
      r.needed[static_cast<std::size_t>(g)] = needed(g, r.rank);
    }
  }
}

int Replay::needed(Group g, int64_t rank) const {
  int n = 0;
  for (int64_t m : prog_.placement.group_members(g, rank)) n += slot_of_.count(m) ? 1 : 0;
  return n;
}

int64_t Replay::p2p_ns(int64_t src, int64_t dst, int64_t bytes) {
  auto it = p2p_.find({src, dst});
  if (it == p2p_.end()) {
    const std::vector<int64_t> pair = {src, dst};
    it = p2p_.emplace(std::make_pair(src, dst), sim::CollectiveCost(sim::CollectiveKind::kSendRecv, pair, topology_)).first;
  }
  return it->second.time_ns(bytes);
}

int64_t Replay::duration(const Instr& in) {
  switch (in.op) {
    case Op::kForward:
    case Op::kBackward:
    case Op::kBackwardInput:
    case Op::kBackwardWeight:
    case Op::kRecompute: return to_ns(compute_.compute_s(in.op, in.unit_begin, in.unit_end));
    case Op::kOptimizerStep:
      return to_ns((in.flags & program::kFlagOnHost) ? compute_.optimizer_host_s(in.elems) : compute_.optimizer_gpu_s(in.elems));
    case Op::kOffloadCopy: return to_ns(compute_.offload_copy_s(in.bytes));
    case Op::kReleaseParams: return 0;
    case Op::kGradNormAllReduce: {
      const int64_t world = prog_.placement.world();
      const int64_t nodes = (world + cluster_.gpus_per_node - 1) / cluster_.gpus_per_node;
      const int64_t local = std::min(world, cluster_.gpus_per_node);
      return 2 * log2ceil(local) * topology_.intra_latency_ns() + 2 * log2ceil(nodes) * topology_.inter_latency_ns();
    }
    default: break;
  }
  const sim::CollectiveKind kind = kind_of(in.op);
  auto& list = costs_[{static_cast<int>(kind), static_cast<int>(in.group)}];
  if (list.empty()) {
    // every placement this group kind takes on the simulated ranks; the simulator times all of
    // them with whichever it met first, so take the fastest
    std::map<std::vector<int64_t>, bool> seen;
    for (const Rank& r : ranks_) {
      std::vector<int64_t> members = prog_.placement.group_members(in.group, r.rank);
      const int64_t base = members.front() - members.front() % cluster_.gpus_per_node;
      for (int64_t& m : members) m -= base;
      if (seen.emplace(members, true).second) list.emplace_back(kind, members, topology_);
    }
  }
  int64_t best = -1;
  for (const sim::CollectiveCost& c : list) {
    const int64_t t = c.time_ns(in.bytes);
    if (best < 0 || t < best) best = t;
  }
  return std::max<int64_t>(0, best);
}

void Replay::end(int32_t slot, int32_t k, int64_t t) {
  finish_ = std::max(finish_, t);
  Rank& r = ranks_[static_cast<std::size_t>(slot)];
  const RoleGraph& g = *r.graph;
  auto release = [&](int32_t next) {
    auto& ready = r.ready[static_cast<std::size_t>(next)];
    ready = std::max(ready, t);
    if (--r.waiting[static_cast<std::size_t>(next)] == 0) work_.emplace_back(slot, next);
  };
  if (g.lane_next[static_cast<std::size_t>(k)] >= 0) release(g.lane_next[static_cast<std::size_t>(k)]);
  for (int32_t s = g.succ_begin[static_cast<std::size_t>(k)]; s < g.succ_begin[static_cast<std::size_t>(k) + 1]; ++s) {
    release(g.succ[static_cast<std::size_t>(s)]);
  }
}

void Replay::start(int32_t slot, int32_t k, int64_t t) {
  Rank& r = ranks_[static_cast<std::size_t>(slot)];
  const Instr& in = r.role->instrs[static_cast<std::size_t>(k)];
  const program::Placement& pl = prog_.placement;
  if (program::is_send(in.op) || program::is_recv(in.op)) {
    const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(r.rank), pl.tp_index_of(r.rank));
    const bool grad = in.op == Op::kSendGrad || in.op == Op::kRecvGrad;
    const int64_t transfer = p2p_ns(program::is_send(in.op) ? r.rank : peer, program::is_send(in.op) ? peer : r.rank, in.bytes);
    if (program::is_send(in.op)) {
      Message& m = messages_[message_key(r.rank, peer, grad, in.mb, in.chunk)];
      m.send_start = t;
      end(slot, k, t + transfer);
      if (m.parked_slot >= 0) end(m.parked_slot, m.parked_instr, std::max(m.parked_ready, t + transfer));
      return;
    }
    Message& m = messages_[message_key(peer, r.rank, grad, in.mb, in.peer_chunk)];
    if (m.send_start >= 0) {
      end(slot, k, std::max(t, m.send_start + transfer));
    } else {
      m.parked_slot = slot;
      m.parked_instr = k;
      m.parked_ready = t;
    }
    return;
  }
  const int need = r.needed[static_cast<std::size_t>(in.group)];
  if (program::is_collective(in.op) && need > 1) {
    // starts when every simulated member has issued it (the simulator's arrival rule)
    const std::vector<int64_t> members = pl.group_members(in.group, r.rank);
    const auto key = std::make_tuple(static_cast<int>(in.group), members.front(),
                                     r.issued[static_cast<std::size_t>(in.group)]++);
    Gathering& gat = gatherings_[key];
    gat.members.emplace_back(slot, k);
    gat.latest = std::max(gat.latest, t);
    if (static_cast<int>(gat.members.size()) < need) return;
    const int64_t done = gat.latest + duration(in);
    const std::vector<std::pair<int32_t, int32_t>> arrived = std::move(gat.members);
    gatherings_.erase(key);
    for (const auto& [s, i] : arrived) end(s, i, done);
    return;
  }
  end(slot, k, t + duration(in));
}

int64_t Replay::run() {
  for (int32_t slot = 0; slot < static_cast<int32_t>(ranks_.size()); ++slot) {
    const Rank& r = ranks_[static_cast<std::size_t>(slot)];
    for (int32_t k = 0; k < static_cast<int32_t>(r.waiting.size()); ++k) {
      if (r.waiting[static_cast<std::size_t>(k)] == 0) work_.emplace_back(slot, k);
    }
  }
  while (!work_.empty()) {
    const auto [slot, k] = work_.back();
    work_.pop_back();
    start(slot, k, ranks_[static_cast<std::size_t>(slot)].ready[static_cast<std::size_t>(k)]);
  }
  for (const Rank& r : ranks_) {
    for (std::size_t k = 0; k < r.waiting.size(); ++k) {
      if (r.waiting[k] > 0) throw std::logic_error("critical path: instruction never became ready");
    }
  }
  return finish_;
}

}  // namespace

double critical_path_s(const Program& prog, const spec::Cluster& cluster) {
  return static_cast<double>(Replay(prog, cluster).run()) * 1e-9 * (1 - 1e-6);
}

}  // namespace stagecraft::planner
