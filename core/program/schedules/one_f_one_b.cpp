#include <algorithm>

#include "core/program/schedules/schedules.hpp"

namespace stagecraft::program {

int64_t one_f_one_b_warmup(int64_t p, int64_t m, int64_t stage) { return std::min(p - stage - 1, m); }
int64_t in_flight_limit(int64_t p, int64_t m, int64_t stage) { return std::min(p - stage, m); }

std::vector<int64_t> warmup_held_sets(spec::Schedule schedule, int64_t p, int64_t m, int64_t v, int64_t stage) {
  std::vector<int64_t> sets(static_cast<std::size_t>(v), 0);
  switch (schedule) {
    case spec::Schedule::kGpipe: sets[0] = m; break;
    case spec::Schedule::kInterleaved: {
      const int64_t held = std::min(interleaved_warmup(p, m, v, stage) + 1, m * v);
      for (int64_t k = 0; k < held; ++k) ++sets[static_cast<std::size_t>(interleaved_pass(Pass::kForward, k, p, v).chunk)];
      break;
    }
    default: sets[0] = in_flight_limit(p, m, stage); break;
  }
  return sets;
}

std::vector<Step> one_f_one_b_steps(int64_t p, int64_t m, int64_t stage) {
  const int64_t warmup = one_f_one_b_warmup(p, m, stage);
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
