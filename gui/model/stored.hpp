// A results store read back (File > Open results db): its searches, and one search's plans as the
// rows the table shows (planner::Store, the file `stagecraft results` reads), with the Pareto
// front recomputed by the search's own rule (planner::pareto_front).
#pragma once

#include <string>
#include <vector>

#include "planner/store.hpp"

namespace stagecraft::gui {

std::vector<planner::StoredSearch> stored_searches(const std::string& path);
// Every plan of search `id`, best first; throws planner::StoreError or spec::SpecError naming the file.
std::vector<planner::Evaluated> stored_plans(const std::string& path, int64_t id);

}  // namespace stagecraft::gui
