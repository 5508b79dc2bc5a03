// Questions answered from a Program's order alone, without timing: how many micro-batches'
// activations a stage holds at once, and how many instructions of each kind it runs. The planner
// uses them to prune plans analytically; tests use them to check the schedules.
#pragma once

#include <array>
#include <cstdint>

#include "core/program/program.hpp"

namespace stagecraft::program {

// Peak number of (micro-batch, chunk) activation sets held at once: a set is held from the first
// Forward of (mb, chunk) to the last instruction that consumes it (Backward or BackwardWeight).
int64_t peak_activation_sets(const RoleProgram& role);
std::array<int64_t, kOpCount> op_counts(const RoleProgram& role);
// Sum of `elems` over instructions of `op`.
int64_t op_elems(const RoleProgram& role, Op op);

}  // namespace stagecraft::program
