#include "sim/models/collective_flows.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace stagecraft::sim {

int64_t nodes_spanned(std::span<const int64_t> group, int64_t gpus_per_node) {
  int64_t nodes = 1;
  for (std::size_t i = 1; i < group.size(); ++i) nodes += group[i] / gpus_per_node != group[i - 1] / gpus_per_node;
  return nodes;
}

RingFlow ring_flow(std::span<const int64_t> group, int64_t member, int64_t gpus_per_node) {
  const auto it = std::find(group.begin(), group.end(), member);
  if (it == group.end()) throw std::invalid_argument("ring_flow: GPU " + std::to_string(member) + " is not in the group");
  return ring_flow_at(group, it - group.begin(), nodes_spanned(group, gpus_per_node));
}

RingFlow ring_flow_at(std::span<const int64_t> group, int64_t me, int64_t nodes) {
  const auto n = static_cast<int64_t>(group.size());
  RingFlow f;
  f.parts = n;
  if (nodes > 1) {
    f.successor = group[static_cast<std::size_t>((me + n / nodes) % n)];
    f.share = n / nodes;
  } else {
    f.successor = group[static_cast<std::size_t>((me + 1) % n)];
  }
  return f;
}

int64_t ring_flow_bytes(const RingFlow& f, CollectiveKind kind, int64_t bytes) {
  const int64_t sent = (bytes * (f.parts - 1) + f.parts - 1) / f.parts;   // ⌈S·(n − 1)/n⌉
  return (sent + f.share - 1) / f.share * (kind == CollectiveKind::kAllReduce ? 2 : 1);
}

}  // namespace stagecraft::sim
