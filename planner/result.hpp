// What a search keeps of one simulated plan (Metrics: the SCHEMAS.md "simulate --json" numbers
// as a flat, trivially copyable record, so ranks exchange them as bytes and the store keeps them
// as columns), the search's counters, and their JSON forms.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/plan.hpp"
#include "planner/prune.hpp"
#include "planner/space.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {

struct Metrics {
  double step_time_s = 0, tokens_per_s = 0, model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0, mfu = 0;
  double bubble_fraction = 0;
  double compute_s = 0, exposed_comm_s = 0, bubble_s = 0, tp_s = 0, pp_s = 0, dp_s = 0;
  int64_t peak_memory_bytes = 0, peak_rank = 0;
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0, reserved = 0;
  int32_t fits = 0;     // 1: the peak fits the GPU's memory
  int32_t failed = 0;   // 1: lowering or simulation threw (never expected; logged)
};

Metrics metrics_of(const sim::SimResult& r);
// SCHEMAS.md "simulate --json" keys; `plan` is the full plan after defaults, `capacity` the GPU's
// memory (for fit_reason when it does not fit).
nlohmann::json to_json(const Metrics& m, const spec::Plan& plan, int64_t capacity);
// The inverse of the numbers of to_json (a store row, an imported result).
Metrics metrics_from_json(const nlohmann::json& j);

// One simulated candidate.
struct Evaluated {
  Candidate candidate;
  std::string key;          // plan_key of the enumerated plan: the deterministic tie-break
  spec::Plan plan;          // after defaults (stage_layers filled)
  Metrics metrics;
  Estimate estimate;        // its bounds before lowering (prune.hpp)
  double critical_path_s = 0;   // its contention-free step time after lowering (critical_path.hpp)
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
