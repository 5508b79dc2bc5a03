#include "planner/sizes.hpp"

namespace stagecraft::planner {

namespace {

// Time per token and cost per token of a size.
double time_of(const sim::RunCost& c) { return c.step_time_s / c.tokens_per_step; }
double cost_of(const sim::RunCost& c) { return c.gpu_hours_per_million_tokens; }

bool dominates(const sim::RunCost& j, const sim::RunCost& i) {
  return time_of(j) <= time_of(i) && cost_of(j) <= cost_of(i) && (time_of(j) < time_of(i) || cost_of(j) < cost_of(i));
}

}  // namespace

const char* to_string(Objective o) { return o == Objective::kCost ? "cost" : o == Objective::kGoodput ? "goodput" : "time"; }

std::optional<Objective> parse_objective(const std::string& name) {
  if (name == "time") return Objective::kTime;
  if (name == "cost") return Objective::kCost;
  if (name == "goodput") return Objective::kGoodput;
  return std::nullopt;
}

std::vector<bool> time_cost_front(const std::vector<SizeCost>& sizes) {
  std::vector<bool> front(sizes.size(), false);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (!sizes[i]) continue;
    front[i] = true;
    for (std::size_t j = 0; j < sizes.size() && front[i]; ++j) {
      if (j != i && sizes[j] && dominates(*sizes[j], *sizes[i])) front[i] = false;
    }
  }
  return front;
}

std::optional<std::size_t> choose_size(const std::vector<SizeCost>& sizes, Objective objective) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (!sizes[i]) continue;
    if (objective == Objective::kGoodput) {
      if (!sizes[i]->goodput) continue;
      const double w = sizes[i]->goodput->wall_s;
      if (!best || w < sizes[*best]->goodput->wall_s || (w == sizes[*best]->goodput->wall_s && sizes[i]->gpus < sizes[*best]->gpus)) {
        best = i;
      }
      continue;
    }
    if (!best) {
      best = i;
      continue;
    }
    const sim::RunCost& a = *sizes[i];
    const sim::RunCost& b = *sizes[*best];
    const bool better = objective == Objective::kTime
                            ? time_of(a) < time_of(b) || (time_of(a) == time_of(b) && a.gpus < b.gpus)
                            : cost_of(a) < cost_of(b) ||
                                  (cost_of(a) == cost_of(b) &&
                                   (time_of(a) < time_of(b) || (time_of(a) == time_of(b) && a.gpus < b.gpus)));
    if (better) best = i;
  }
  return best;
}

}  // namespace stagecraft::planner
