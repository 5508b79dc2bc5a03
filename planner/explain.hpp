// Explanation of a search: what limits the best plan, and why it wins, axis by axis.
//
// Limits: the simulator partitions a step into compute, exposed communication (communication the
// compute lane does not hide) and pipeline bubble (SCHEMAS.md "time"); the largest of the three
// is what limits the plan, and the busy time of each communication lane (tp, pp, dp) says which
// traffic it is. Memory: the peak against the GPU's capacity and its largest term.
// Why: for every axis (tp, pp, micro-batch, schedule, ZeRO stage, recompute, sequence
// parallelism, offload, virtual stages) and every other value it takes in the space, the best
// simulated plan with that value and the breakdown term that grew most against the winner; or,
// when no plan with that value was simulated, why not (its step-time lower bound already exceeds
// the K-th best plan, or its memory lower bound exceeds the GPU).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/search.hpp"

namespace stagecraft::planner {

struct AxisAlternative {
  std::string value;
  std::string verdict;         // "simulated", "bound", "memory", "not fitting", "dominated"
  double step_time_s = 0;      // simulated (or the lower bound)
  double delta = 0;            // step_time / best − 1
  std::string plan;            // the plan key, when simulated
  std::string reason;          // in words
};

struct AxisExplanation {
  std::string axis;
  std::string best_value;
  std::vector<AxisAlternative> alternatives;
};

struct Explanation {
  std::string limit;                     // the largest time term, in words
  std::string limit_term;                // "compute" | "exposed communication" | "pipeline bubble"
  std::string memory;                    // peak against capacity, in words
  std::vector<AxisExplanation> axes;
  std::vector<std::string> lines() const;   // for a terminal
  nlohmann::json to_json() const;
};

// Needs at least one plan in result.top.
Explanation explain(const SearchResult& result);

// Expert parallelism, for a mixture-of-experts model's best plan: where its all-to-alls go — the
// bytes a GPU sends a step inside its node and to other nodes (sim::ep_bytes_per_step) — and where
// they would go with each other ep the space allows and the plan's other choices; the step time of
// the best plan simulated with that ep, where it is one. Empty for a dense model.
std::vector<std::string> expert_lines(const Space& space, const Evaluated& best);

}  // namespace stagecraft::planner
