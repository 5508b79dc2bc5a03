// The space map (docs/gui.md "Space map"): a tp x pp grid over the simulated plans — each cell the
// fastest plan that fits with that tensor and pipeline size — so the shape of the space shows at a
// glance (Calculon's heat map). A cell with plans simulated but none fitting says so; a cell no
// simulated plan has says "not simulated" (pruned by a bound, or by memory, before simulation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/search.hpp"

namespace stagecraft::gui {

struct SpaceCell {
  int simulated = 0, fitting = 0;
  std::optional<double> best_step_s;   // the fastest that fits
  std::string best_key;
};

struct SpaceMap {
  std::vector<int64_t> tp, pp;             // the axes' values (ascending), from the space
  std::vector<std::vector<SpaceCell>> cells;   // [tp][pp]
  double fastest = 0, slowest = 0;         // over the cells' best step times
};

SpaceMap space_map(const std::vector<int64_t>& tp_values, const std::vector<int64_t>& pp_values,
                   const std::vector<planner::Evaluated>& plans);

}  // namespace stagecraft::gui
