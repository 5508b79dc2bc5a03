#include <algorithm>
#include <deque>
#include <limits>

#include "core/program/schedules/schedules.hpp"

namespace stagecraft::program {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct StageState {
  int32_t next_f = 0;                  // next micro-batch to run forward
  int32_t next_b = 0;                  // next micro-batch to run B (in order)
  std::deque<int32_t> pending_w;       // B done, W not yet
  int64_t busy_until = 0;
  int64_t in_flight = 0;               // F started, W not finished
  std::vector<Step> steps;
};

}  // namespace

// List schedule in unit time steps: at each tick an idle stage takes, in priority order,
// B (its gradient has arrived), F (its input has arrived and fewer than min(p-i, m) micro-batches
// are in flight), else a pending W. Completions at tick t+1 make inputs available to neighbours.
std::vector<std::vector<Step>> zb_h1_steps(int64_t p, int64_t m) {
  std::vector<StageState> st(static_cast<std::size_t>(p));
  // act_ready[i][mb]: tick the input activation of mb is available on stage i; grad_ready likewise.
  std::vector<std::vector<int64_t>> act_ready(p, std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> grad_ready(p, std::vector<int64_t>(m, kNever));
  for (int64_t mb = 0; mb < m; ++mb) act_ready[0][mb] = 0;
  int64_t remaining = p * m * 3;
  for (int64_t t = 0; remaining > 0; ++t) {
    for (int64_t i = 0; i < p; ++i) {
      StageState& s = st[i];
      if (s.busy_until > t) continue;
      const int64_t limit = in_flight_limit(p, m, i);
      if (s.next_b < s.next_f && grad_ready[i][s.next_b] <= t) {
        const int32_t mb = s.next_b++;
        s.steps.push_back({Pass::kBackwardInput, 0, mb});
        s.pending_w.push_back(mb);
        if (i > 0) grad_ready[i - 1][mb] = t + 1;
      } else if (s.next_f < m && act_ready[i][s.next_f] <= t && s.in_flight < limit) {
        const int32_t mb = s.next_f++;
        s.steps.push_back({Pass::kForward, 0, mb});
        ++s.in_flight;
        if (i + 1 < p) act_ready[i + 1][mb] = t + 1;
        else grad_ready[i][mb] = t + 1;  // the last stage starts backward from its own loss
      } else if (!s.pending_w.empty()) {
        s.steps.push_back({Pass::kBackwardWeight, 0, s.pending_w.front()});
        s.pending_w.pop_front();
        --s.in_flight;
      } else {
        continue;
      }
      s.busy_until = t + 1;
      --remaining;
    }
  }
  std::vector<std::vector<Step>> out;
  out.reserve(static_cast<std::size_t>(p));
  for (StageState& s : st) out.push_back(std::move(s.steps));
  return out;
}

std::vector<std::vector<Step>> schedule_steps(const spec::Plan& plan) {
  const int64_t p = plan.pp, m = plan.micro_batches, v = plan.virtual_stages;
  if (plan.schedule == spec::Schedule::kZbH1) return zb_h1_steps(p, m);
  std::vector<std::vector<Step>> out;
  out.reserve(static_cast<std::size_t>(p));
  for (int64_t i = 0; i < p; ++i) {
    switch (plan.schedule) {
      case spec::Schedule::kGpipe: out.push_back(gpipe_steps(p, m, i)); break;
      case spec::Schedule::kInterleaved: out.push_back(interleaved_steps(p, m, v, i)); break;
      default: out.push_back(one_f_one_b_steps(p, m, i)); break;
    }
  }
  return out;
}

}  // namespace stagecraft::program
