// RoleGraph: an instruction list's dependency graph in the form an interpreter walks it. An
// instruction k may start when every predecessor has finished: the previous instruction on its
// lane and its explicit dependencies (instruction.hpp). The graph stores, per instruction,
//   preds[k]                        how many predecessors it has (lane predecessor + dep_count),
//   lane_next[k]                    the next instruction on its lane, −1 for the last,
//   succ[succ_begin[k] .. succ_begin[k+1])   the instructions that list k as a dependency,
//   lane_count[lane]                how many instructions run on each lane,
// so an interpreter keeps a countdown per instruction (a copy of preds) and, when k finishes,
// decrements lane_next[k] and each successor, starting those that reach zero.
// lower() builds it once per RoleProgram; the simulator and the planner's replay read it. Code that
// edits a lowered list must call rebuild_graphs() afterwards; graph_of() notices a graph that was
// never built (a list assembled by hand) and builds one.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/program/instruction.hpp"

namespace stagecraft::program {

struct RoleProgram;
struct Program;

struct RoleGraph {
  std::vector<int16_t> preds;
  std::vector<int32_t> lane_next;
  std::vector<int32_t> succ_begin;   // instructions + 1 entries
  std::vector<int32_t> succ;
  std::array<int32_t, kLaneCount> lane_count{};
  // per instruction: a compute or a tensor-parallel collective (what the simulator may start
  // ahead of its clock, sim/simulation.cpp "Folding"), packed apart from the 64-byte Instr
  std::vector<uint8_t> early;

  // Built for a list of `instructions` instructions with `deps` dependency entries.
  bool built_for(std::size_t instructions, std::size_t deps) const {
    return lane_next.size() == instructions && succ_begin.size() == instructions + 1 && succ.size() == deps;
  }
};

RoleGraph build_graph(const RoleProgram& role);
void rebuild_graphs(Program& prog);
// role.graph when it was built for this list, else a graph built into `scratch`.
const RoleGraph& graph_of(const RoleProgram& role, RoleGraph& scratch);

}  // namespace stagecraft::program
