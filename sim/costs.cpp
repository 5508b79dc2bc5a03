#include "sim/costs.hpp"

namespace stagecraft::sim {

CostCache::CostCache(const program::Program& prog, const Topology& topology, int64_t gpus_per_node)
    : prog_(prog),
      topology_(topology),
      gpus_per_node_(gpus_per_node) {}

int32_t CostCache::group_of(program::Group kind, int64_t rank) {
  std::vector<int64_t> members = prog_.placement.group_members(kind, rank);
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
  int32_t& index = entry_of_[static_cast<std::size_t>(shape) * program::kOpCount + static_cast<std::size_t>(in.op)];
  if (index < 0) {
    index = static_cast<int32_t>(entries_.size());
    entries_.emplace_back();
  }
  Entry& c = entries_[static_cast<std::size_t>(index)];
  if (c.bytes[c.last] == in.bytes) return c.ns[c.last];  // the size asked for last (bytes ≥ 0, so never an empty slot)
  if (!c.cost) c.cost.emplace(*collective_kind(in.op), shapes_[static_cast<std::size_t>(shape)], topology_);
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
