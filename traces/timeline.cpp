#include "traces/timeline.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "traces/analysis.hpp"

namespace stagecraft::traces {

TimelinePanel timeline_panel(const Trace& t, const std::string& title) {
  TimelinePanel p;
  p.title = title;
  std::vector<Activity> acts = activities(t, t.kernel_level() ? Level::kKernelClass : Level::kInstruction);
  if (acts.empty()) return p;
  int32_t first_step = std::numeric_limits<int32_t>::max();
  for (const Activity& a : acts) first_step = std::min(first_step, a.step);
  std::erase_if(acts, [&](const Activity& a) { return a.step != first_step; });
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const Activity& a : acts) origin = std::min(origin, a.start_ns);
  std::map<std::pair<int64_t, int64_t>, int> rows;  // (rank, lane or stream) -> row, in order
  for (const Activity& a : acts) rows.emplace(std::make_pair(a.rank, a.row), 0);
  int next = 0;
  for (auto& [key, row] : rows) {
    row = next++;
    const std::string lane = t.kernel_level() ? "stream " + std::to_string(key.second)
                                              : program::to_string(static_cast<program::Lane>(key.second));
    p.rows.push_back("rank " + std::to_string(key.first) + " " + lane);
  }
  for (const Activity& a : acts) {
    p.bars.push_back({rows.at({a.rank, a.row}), a.start_ns - origin, a.end_ns - origin, a.kind});
    p.end_ns = std::max(p.end_ns, a.end_ns - origin);
  }
  return p;
}

}  // namespace stagecraft::traces
