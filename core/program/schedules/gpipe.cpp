#include "core/program/schedules/schedules.hpp"

namespace stagecraft::program {

std::vector<Step> gpipe_steps(int64_t /*p*/, int64_t m, int64_t /*stage*/) {
  std::vector<Step> steps;
  steps.reserve(static_cast<std::size_t>(2 * m));
  for (int32_t mb = 0; mb < m; ++mb) steps.push_back({Pass::kForward, 0, mb});
  for (int32_t mb = 0; mb < m; ++mb) steps.push_back({Pass::kBackward, 0, mb});
  return steps;
}

}  // namespace stagecraft::program
