#include "sim/costs.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace stagecraft::sim {

namespace {

// ZeRO++'s quantize kernels around a collective (costs.hpp).
double quantize_bytes(const BucketCollective& c, int64_t group_size) {
  if (!(c.flags & program::kFlagQuantized)) return 0;
  const double e = static_cast<double>(c.elems);
  if (c.op == program::Op::kGatherParams) {
    const double w = static_cast<double>(c.param_bytes), n = static_cast<double>(std::max<int64_t>(group_size, 1));
    return (3 * w + 1) * e / n + 3 * e + (c.bf16 ? 4 * e : 0.0);
  }
  if (c.op == program::Op::kAllToAll && (c.flags & program::kFlagFirstLevel)) {
    return (static_cast<double>(c.param_bytes) + 0.5) * e;
  }
  if (c.op == program::Op::kAllToAll) {
    const double l = static_cast<double>(c.local_size);
    const double nodes = static_cast<double>(c.dp) / l;
    return (l / 2 + 5 + 2 / nodes) * e;
  }
  return 0;
}

}  // namespace

FrameworkWork framework_work(const spec::FrameworkProfile& framework, const BucketCollective& c, int64_t group_size) {
  FrameworkWork w;
  w.pieces = std::max(c.pieces, 1);
  const bool gather = c.op == program::Op::kGatherParams;
  const bool grads = c.op == program::Op::kReduceScatterGrads || c.op == program::Op::kAllReduceGrads;
  const double passes = gather ? framework.gather_copy_passes : (grads ? framework.reduce_copy_passes : 0.0);
  w.copy_bytes = passes * static_cast<double>(c.bytes) + quantize_bytes(c, group_size);
  w.host_s = static_cast<double>(w.pieces) * (static_cast<double>(group_size) * framework.host_s_per_rank +
                                               (gather ? framework.host_s_per_gather : 0.0));
  if (gather && c.offload_param && group_size > 0) {
    w.host_copy_bytes = static_cast<double>(c.bytes) / static_cast<double>(group_size);
  }
  return w;
}

FrameworkWork framework_work(const program::Program& prog, const spec::FrameworkProfile& framework,
                             const program::Instr& in, int64_t group_size) {
  if (!program::is_dp_group(in.group)) return {};
  BucketCollective c;
  c.op = in.op;
  c.flags = in.flags;
  c.bytes = in.bytes;
  c.elems = in.elems;
  c.pieces = prog.collectives_of(in);
  c.param_bytes = prog.param_bytes;
  c.bf16 = spec::storage_dtype(prog.training.dtype) == spec::Dtype::kBf16;
  c.local_size = prog.placement.local_size();
  c.dp = prog.placement.dp;
  c.offload_param = prog.plan.zero.offload_param == spec::Offload::kCpu;
  return framework_work(framework, c, group_size);
}

std::pair<double, double> ep_bytes_per_step(const program::Program& prog, int64_t gpus_per_node) {
  const program::Placement& pl = prog.placement;
  const bool flex = prog.plan.moe_dispatcher == spec::MoeDispatcher::kFlex;
  const program::Group kind = flex ? program::Group::kExpertTpEp : program::Group::kEp;
  if ((flex ? pl.ep * pl.etp : pl.ep) <= 1) return {0.0, 0.0};
  // the stage whose ranks send the most (a stage of dense layers alone sends none)
  double bytes = 0;
  const program::RoleProgram* busiest = nullptr;
  for (const program::RoleProgram& role : prog.roles) {
    double b = 0;
    for (const program::Instr& in : role.instrs) {
      if (in.group == kind && in.op == program::Op::kAllToAll) b += static_cast<double>(in.bytes);
    }
    if (busiest == nullptr || b > bytes) {
      bytes = b;
      busiest = &role;
    }
  }
  if (busiest == nullptr || busiest->ranks.empty() || bytes == 0) return {0.0, 0.0};
  const int64_t rank = busiest->ranks.front();
  const std::vector<int64_t> group = pl.group_members(kind, rank);
  if (flex) {
    const DispatchShares d = dispatch_shares(dispatch_routing(prog.model, pl.ep, pl.etp), group, gpus_per_node);
    return {bytes * d.local, bytes * d.remote};
  }
  const double n = static_cast<double>(group.size());
  double local = 0;
  for (int64_t r : group) local += (r != rank && r / gpus_per_node == rank / gpus_per_node) ? 1 : 0;
  const double remote = n - 1 - local;
  return {bytes * local / n, bytes * remote / n};
}

double dp_internode_bytes_per_micro_batch(const program::Program& prog, int64_t gpus_per_node) {
  const program::Placement& pl = prog.placement;
  double most = 0;
  for (int64_t s = 0; s < pl.pp; ++s) {
    const int64_t rank = pl.rank(s, 0, 0);
    std::map<std::pair<int, int32_t>, double> per_group;   // (group, op) -> bytes per byte of S, cached
    double bytes = 0;
    for (const program::Instr& in : prog.rank(rank)) {
      if (!program::is_dp_group(in.group) || !program::is_collective(in.op)) continue;
      const auto key = std::make_pair(static_cast<int>(in.group), static_cast<int32_t>(in.op));
      auto it = per_group.find(key);
      if (it == per_group.end()) {
        const std::vector<int64_t> members = pl.group_members(in.group, rank);
        std::set<int64_t> nodes;
        for (int64_t m : members) nodes.insert(m / gpus_per_node);
        const double n = static_cast<double>(members.size()), N = static_cast<double>(nodes.size()), k = n / N;
        double factor = 0;
        if (N > 1) {
          const CollectiveKind kind = *collective_kind(in.op);
          factor = kind == CollectiveKind::kAllToAll ? (n - k) / n : (n - 1) / n / k * (kind == CollectiveKind::kAllReduce ? 2 : 1);
        }
        it = per_group.emplace(key, factor).first;
      }
      bytes += it->second * static_cast<double>(in.bytes);
    }
    most = std::max(most, bytes);
  }
  return most / static_cast<double>(std::max<int64_t>(prog.plan.micro_batches, 1));
}

CostCache::CostCache(const program::Program& prog, const Topology& topology, const spec::Cluster& cluster)
    : prog_(prog),
      topology_(topology),
      gpus_per_node_(cluster.gpus_per_node),
      framework_(prog.training.framework_profile(prog.plan.tp, prog.plan.zero.stage)),
      hbm_Bps_(cluster.gpu.hbm_Bps * cluster.gpu.memory_efficiency),
      pcie_Bps_(cluster.host.pcie_Bps),
      routing_(dispatch_routing(prog.model, prog.plan.ep, prog.plan.etp)) {}

DispatchRouting dispatch_routing(const spec::Model& m, int64_t ep, int64_t etp) {
  return {m.moe.experts, m.moe.top_k, m.moe.router_groups, m.moe.router_group_top_k, ep, etp};
}

int32_t CostCache::group_of(program::Group kind, int64_t rank) {
  if (kind == program::Group::kWorld && world_group_ >= 0) return world_group_;
  if (kind == program::Group::kWorld) return world_group_ = group_of_members(prog_.placement.group_members(kind, rank));
  return group_of_members(prog_.placement.group_members(kind, rank));
}

int32_t CostCache::group_of_members(std::vector<int64_t> members) {
  const auto [it, fresh] = group_ids_.try_emplace(members, static_cast<int32_t>(groups_.size()));
  if (!fresh) return it->second;
  std::vector<int64_t> shape = members;
  const int64_t base = shape.front() - shape.front() % gpus_per_node_;
  for (int64_t& m : shape) m -= base;
  const auto [s, new_shape] = shape_ids_.try_emplace(shape, static_cast<int32_t>(shapes_.size()));
  if (new_shape) {
    shapes_.push_back(std::move(shape));
    entry_of_.resize(shapes_.size() * program::kOpCount, -1);
  }
  shape_of_.push_back(s->second);
  groups_.push_back(std::move(members));
  return it->second;
}

int64_t CostCache::collective_ns(const program::Instr& in, int32_t group) {
  if (in.op == program::Op::kGradNormAllReduce) {
    if (!gradnorm_) {
      std::vector<int64_t> world(static_cast<std::size_t>(prog_.placement.world()));
      for (std::size_t r = 0; r < world.size(); ++r) world[r] = static_cast<int64_t>(r);
      gradnorm_.emplace(CollectiveKind::kAllReduce, world, topology_);
    }
    return gradnorm_->time_ns(in.bytes);
  }
  const int32_t shape = shape_of_[static_cast<std::size_t>(group)];
  if (!program::is_dp_group(in.group)) return one_ns(in, shape, in.bytes);
  // a data-parallel bucket: k pieces, and the framework's copies and host work
  const FrameworkWork w = framework_work(prog_, framework_, in, static_cast<int64_t>(members(group).size()));
  const double extra_s = w.extra_s(hbm_Bps_, pcie_Bps_);
  const int64_t piece = program::collective_piece(in.bytes, w.pieces);
  return w.pieces * one_ns(in, shape, piece) + static_cast<int64_t>(std::llround(extra_s * 1e9));
}

CostCache::Entry& CostCache::entry(const program::Instr& in, int32_t shape) {
  const bool dispatch = is_dispatch(in);
  if (dispatch && dispatch_entry_of_.size() < shapes_.size()) dispatch_entry_of_.resize(shapes_.size(), -1);
  int32_t& index = dispatch ? dispatch_entry_of_[static_cast<std::size_t>(shape)]
                            : entry_of_[static_cast<std::size_t>(shape) * program::kOpCount + static_cast<std::size_t>(in.op)];
  if (index < 0) {
    index = static_cast<int32_t>(entries_.size());
    entries_.emplace_back();
  }
  Entry& c = entries_[static_cast<std::size_t>(index)];
  if (!c.cost) c.cost.emplace(*collective_kind(in.op), shapes_[static_cast<std::size_t>(shape)], topology_, dispatch ? &routing_ : nullptr);
  return c;
}

double CostCache::flow_scale(const program::Instr& in, int32_t group) {
  return is_dispatch(in) ? entry(in, shape_of_[static_cast<std::size_t>(group)]).cost->flow_scale() : 1.0;
}

int64_t CostCache::one_ns(const program::Instr& in, int32_t shape, int64_t bytes) {
  Entry& c = entry(in, shape);
  if (c.bytes[c.last] == bytes) return c.ns[c.last];  // the size asked for last (bytes ≥ 0, so never an empty slot)
  for (std::size_t i = 0; i < c.bytes.size(); ++i) {
    if (c.bytes[i] == bytes) {
      c.last = static_cast<uint32_t>(i);
      return c.ns[i];
    }
  }
  const std::size_t slot = c.next++ % c.bytes.size();
  c.bytes[slot] = bytes;
  c.ns[slot] = c.cost->time_ns(bytes);
  c.last = static_cast<uint32_t>(slot);
  return c.ns[slot];
}

int64_t CostCache::p2p_ns(int64_t src, int64_t dst, int64_t bytes) {
  const uint64_t key = (static_cast<uint64_t>(src) << 32) | static_cast<uint64_t>(dst);
  if (key == last_p2p_key_ && bytes == last_p2p_bytes_) return last_p2p_ns_;
  auto it = p2p_.find(key);
  if (it == p2p_.end()) {
    const std::array<int64_t, 2> pair{src, dst};
    it = p2p_.emplace(key, CollectiveCost(CollectiveKind::kSendRecv, pair, topology_)).first;
  }
  last_p2p_key_ = key;
  last_p2p_bytes_ = bytes;
  last_p2p_ns_ = it->second.time_ns(bytes);
  return last_p2p_ns_;
}

}  // namespace stagecraft::sim
