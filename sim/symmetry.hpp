// Symmetry: which ranks a simulation runs. The tp peers of a pipeline stage run the same
// instruction list at the same times, and so do the data-parallel replicas of a symmetric plan,
// so by default one rank per stage stands for all of them: data-parallel index 0, tensor-parallel
// index 0. Group members outside that set are taken to arrive at a collective together with the
// simulated ones. `every_rank` (stagecraft simulate --full, or the simulator's fast paths off)
// simulates the whole world instead. Trace analysis maps a measured rank to its simulated
// counterpart with the same rule.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"

namespace stagecraft::sim {

inline std::vector<int64_t> simulated_ranks(const program::Placement& pl, bool every_rank) {
  std::vector<int64_t> out;
  if (every_rank) {
    for (int64_t r = 0; r < pl.world(); ++r) out.push_back(r);
  } else {
    for (int64_t s = 0; s < pl.pp; ++s) out.push_back(pl.rank(s, 0, 0));
  }
  return out;
}

// The rank that stands for `rank` in a one-replica simulation.
inline int64_t replica_rank(const program::Placement& pl, int64_t rank) { return pl.rank(pl.stage_of(rank), 0, 0); }

}  // namespace stagecraft::sim
