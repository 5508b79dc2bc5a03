#include "gui/model/stored.hpp"

#include "core/spec/plan.hpp"

namespace stagecraft::gui {

std::vector<planner::StoredSearch> stored_searches(const std::string& path) {
  planner::Store store(path, true);
  return store.searches();
}

std::vector<planner::Evaluated> stored_plans(const std::string& path, int64_t id) {
  planner::Store store(path, true);
  std::vector<planner::Evaluated> out;
  for (const planner::StoredPlan& p : store.plans(id, "", 0)) {
    planner::Evaluated e;
    e.key = p.key;
    e.plan = spec::plan_from_json(p.plan, path);
    e.metrics = p.numbers;
    e.reused = true;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace stagecraft::gui
