#include <algorithm>

#include "core/program/schedules/schedules.hpp"

namespace stagecraft::program {

Step interleaved_pass(Pass pass, int64_t k, int64_t p, int64_t v) {
  const int64_t in_group = k % (p * v);
  int64_t chunk = in_group / p;
  if (pass == Pass::kBackward) chunk = v - 1 - chunk;
  const int64_t mb = (k / (p * v)) * p + k % p;
  return {pass, static_cast<int32_t>(chunk), static_cast<int32_t>(mb)};
}

int64_t interleaved_warmup(int64_t p, int64_t m, int64_t v, int64_t stage) {
  const int64_t total = m * v;
  return m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
}

std::vector<Step> interleaved_steps(int64_t p, int64_t m, int64_t v, int64_t stage) {
  const int64_t total = m * v;
  const int64_t warmup = interleaved_warmup(p, m, v, stage);
  std::vector<Step> steps;
  steps.reserve(static_cast<std::size_t>(2 * total));
  int64_t next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) steps.push_back(interleaved_pass(Pass::kForward, next_f, p, v));
  while (next_f < total) {
    steps.push_back(interleaved_pass(Pass::kForward, next_f++, p, v));
    steps.push_back(interleaved_pass(Pass::kBackward, next_b++, p, v));
  }
  while (next_b < total) steps.push_back(interleaved_pass(Pass::kBackward, next_b++, p, v));
  return steps;
}

}  // namespace stagecraft::program
