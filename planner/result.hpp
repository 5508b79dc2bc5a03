// What a search keeps of one simulated plan (sim::Metrics, the simulator's own result, kept
// as-is), the search's counters and their JSON form.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/plan.hpp"
#include "planner/prune.hpp"
#include "planner/space.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::planner {

using sim::Metrics;

// One simulated candidate.
struct Evaluated {
  Candidate candidate;
  std::string key;          // plan_key of the enumerated plan: the deterministic tie-break
  spec::Plan plan;          // after defaults (stage_layers filled)
  Metrics metrics;
  Estimate estimate;        // its bounds before lowering (prune.hpp)
  double critical_path_s = 0;   // its contention-free step time after lowering (sim::contention_free_step_s);
                                // 0 where it was simulated first (search.cpp lower_and_simulate)
  bool reused = false;      // taken from the results store (--resume), not simulated again
};

// Ordering of results: tokens_per_s descending, then plan key ascending.
bool better(const Evaluated& a, const Evaluated& b);

struct Counts {
  int64_t candidates = 0;     // the whole space
  int64_t dominated = 0;      // pruned: an identical Program earlier, or offload where no-offload fits
  int64_t pruned_memory = 0;  // pruned: memory lower bound above the GPU's memory
  int64_t pruned_bound = 0;   // pruned: step-time lower bound cannot enter the top K (nor the Pareto window)
  int64_t pruned_critical_path = 0;   // of those, ruled out by the critical path after lowering
  int64_t evaluated = 0;      // simulated (or reused from the store)
  int64_t reused = 0;         // of those, taken from the store
  int64_t fitting = 0;        // of those, fit in memory
  int64_t failed = 0;         // of those, lowering or simulation threw
  int64_t unexplored = 0;     // survivors not reached because the search was interrupted
  int64_t pruned() const { return dominated + pruned_memory + pruned_bound; }
};

nlohmann::json to_json(const Counts& c);

}  // namespace stagecraft::planner
