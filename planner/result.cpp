#include "planner/result.hpp"

namespace stagecraft::planner {

bool better(const Evaluated& a, const Evaluated& b) {
  if (a.metrics.tokens_per_s != b.metrics.tokens_per_s) return a.metrics.tokens_per_s > b.metrics.tokens_per_s;
  return a.key < b.key;
}

nlohmann::json to_json(const Counts& c) {
  return {{"candidates", c.candidates},       {"dominated", c.dominated}, {"pruned_memory", c.pruned_memory},
          {"pruned_bound", c.pruned_bound},   {"pruned_critical_path", c.pruned_critical_path},
          {"evaluated", c.evaluated}, {"reused", c.reused},
          {"fitting", c.fitting},             {"failed", c.failed},       {"unexplored", c.unexplored}};
}

}  // namespace stagecraft::planner
