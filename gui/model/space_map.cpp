#include "gui/model/space_map.hpp"

#include <algorithm>
#include <cmath>

namespace stagecraft::gui {

SpaceMap space_map(const std::vector<int64_t>& tp_values, const std::vector<int64_t>& pp_values,
                   const std::vector<planner::Evaluated>& plans) {
  SpaceMap m;
  m.tp = tp_values;
  m.pp = pp_values;
  m.cells.assign(m.tp.size(), std::vector<SpaceCell>(m.pp.size()));
  const std::vector<const planner::Evaluated*> best_first = [&] {
    std::vector<const planner::Evaluated*> v;
    for (const planner::Evaluated& e : plans) v.push_back(&e);
    std::stable_sort(v.begin(), v.end(), [](const auto* a, const auto* b) { return planner::better(*a, *b); });
    return v;
  }();
  m.fastest = INFINITY;
  for (const planner::Evaluated* e : best_first) {
    const auto ti = std::find(m.tp.begin(), m.tp.end(), e->plan.tp);
    const auto pi = std::find(m.pp.begin(), m.pp.end(), e->plan.pp);
    if (ti == m.tp.end() || pi == m.pp.end()) continue;
    SpaceCell& c = m.cells[static_cast<std::size_t>(ti - m.tp.begin())][static_cast<std::size_t>(pi - m.pp.begin())];
    ++c.simulated;
    if (!e->metrics.fits || e->metrics.failed) continue;
    ++c.fitting;
    if (!c.best_step_s) {   // best first: the first that fits is the cell's best
      c.best_step_s = e->metrics.step_time_s;
      c.best_key = e->key;
      m.fastest = std::min(m.fastest, *c.best_step_s);
      m.slowest = std::max(m.slowest, *c.best_step_s);
    }
  }
  if (!std::isfinite(m.fastest)) m.fastest = 0;
  return m;
}

}  // namespace stagecraft::gui
