#include <algorithm>

#include "core/program/schedules/schedules.hpp"

namespace stagecraft::program {

std::vector<Step> one_f_one_b_steps(int64_t p, int64_t m, int64_t stage) {
  const int64_t warmup = std::min(p - stage - 1, m);
  std::vector<Step> steps;
  steps.reserve(static_cast<std::size_t>(2 * m));
  int32_t next_f = 0, next_b = 0;
  for (int64_t i = 0; i < warmup; ++i) steps.push_back({Pass::kForward, 0, next_f++});
  while (next_f < m) {
    steps.push_back({Pass::kForward, 0, next_f++});
    steps.push_back({Pass::kBackward, 0, next_b++});
  }
  while (next_b < m) steps.push_back({Pass::kBackward, 0, next_b++});
  return steps;
}

}  // namespace stagecraft::program
