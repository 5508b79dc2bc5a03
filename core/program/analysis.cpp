#include "core/program/analysis.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace stagecraft::program {

int64_t peak_activation_sets(const RoleProgram& role) {
  std::map<std::pair<int32_t, int32_t>, int32_t> last;  // (chunk, mb) -> index of its last consumer
  for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {
    const Instr& in = role.instrs[i];
    if (in.op == Op::kBackward || in.op == Op::kBackwardWeight) last[{in.chunk, in.mb}] = i;
  }
  std::map<std::pair<int32_t, int32_t>, bool> held;
  int64_t now = 0, peak = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {
    const Instr& in = role.instrs[i];
    const std::pair<int32_t, int32_t> key{in.chunk, in.mb};
    if (in.op == Op::kForward && !held[key]) {
      held[key] = true;
      peak = std::max(peak, ++now);
    }
    auto it = last.find(key);
    if (it != last.end() && it->second == i) --now;
  }
  return peak;
}

std::array<int64_t, kOpCount> op_counts(const RoleProgram& role) {
  std::array<int64_t, kOpCount> counts{};
  for (const Instr& in : role.instrs) ++counts[static_cast<std::size_t>(in.op)];
  return counts;
}

int64_t op_elems(const RoleProgram& role, Op op) {
  int64_t total = 0;
  for (const Instr& in : role.instrs) {
    if (in.op == op) total += in.elems;
  }
  return total;
}

}  // namespace stagecraft::program
