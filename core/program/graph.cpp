#include "core/program/graph.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "core/program/program.hpp"

namespace stagecraft::program {

RoleGraph build_graph(const RoleProgram& role) {
  RoleGraph g;
  const auto n = static_cast<int32_t>(role.instrs.size());
  g.lane_next.assign(static_cast<std::size_t>(n), -1);
  g.preds.assign(static_cast<std::size_t>(n), 0);
  g.succ_begin.assign(static_cast<std::size_t>(n) + 1, 0);
  g.early.assign(static_cast<std::size_t>(n), 0);
  std::array<int32_t, kLaneCount> last;
  last.fill(-1);
  for (int32_t k = 0; k < n; ++k) {
    const Instr& in = role.instrs[static_cast<std::size_t>(k)];
    const auto lane = static_cast<std::size_t>(in.lane);
    ++g.lane_count[lane];
    g.early[static_cast<std::size_t>(k)] = is_compute(in.op) || (in.lane == Lane::kTp && is_collective(in.op));
    int32_t preds = in.dep_count;
    if (last[lane] >= 0) {
      g.lane_next[static_cast<std::size_t>(last[lane])] = k;
      ++preds;
    }
    last[lane] = k;
    if (preds > std::numeric_limits<int16_t>::max()) {
      throw std::length_error("RoleGraph: instruction #" + std::to_string(role.first_id + k) + " has " +
                              std::to_string(preds) + " predecessors");
    }
    g.preds[static_cast<std::size_t>(k)] = static_cast<int16_t>(preds);
    for (int32_t d : role.deps_of(in)) ++g.succ_begin[static_cast<std::size_t>(d) + 1];
  }
  for (int32_t k = 0; k < n; ++k) g.succ_begin[static_cast<std::size_t>(k) + 1] += g.succ_begin[static_cast<std::size_t>(k)];
  g.succ.assign(static_cast<std::size_t>(g.succ_begin.back()), 0);
  std::vector<int32_t> fill(g.succ_begin.begin(), g.succ_begin.end() - 1);
  for (int32_t k = 0; k < n; ++k) {
    for (int32_t d : role.deps_of(role.instrs[static_cast<std::size_t>(k)])) {
      g.succ[static_cast<std::size_t>(fill[static_cast<std::size_t>(d)]++)] = k;
    }
  }
  return g;
}

void rebuild_graphs(Program& prog) {
  for (RoleProgram& role : prog.roles) role.graph = build_graph(role);
}

const RoleGraph& graph_of(const RoleProgram& role, RoleGraph& scratch) {
  if (role.graph.built_for(role.instrs.size(), role.deps.size())) return role.graph;
  scratch = build_graph(role);
  return scratch;
}

}  // namespace stagecraft::program
