// Choosing how many GPUs to use: one search per size (search.hpp, a Space each), and across the
// sizes the front of time against cost and the size an objective picks.
//
// Each size is represented by its fastest plan that fits (within one size every plan uses the
// same GPUs, so the fastest is also the cheapest per token). For sizes i and j with time per token
// t = 1 / tokens_per_s and cost per token c = GPU-hours per million tokens (sim/run_cost.hpp; a
// price per GPU-hour scales every size alike, so GPU-hours rank as money does):
//   j dominates i      when t_j <= t_i and c_j <= c_i, one of them strictly;
//   the front          the sizes no other size dominates, by increasing GPUs;
//   objective "time"   the size of least t (ties: fewer GPUs);
//   objective "cost"   the size of least c (ties: less t, then fewer GPUs);
//   objective "goodput" the size of least expected time to train with failures, checkpoints and
//                      restarts (sim/goodput.hpp: T_w, which grows with the failure rate as the job
//                      grows), for a token budget on a profile with a reliability section (ties:
//                      fewer GPUs). A size without that figure is never chosen by it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sim/run_cost.hpp"

namespace stagecraft::planner {

enum class Objective { kTime, kCost, kGoodput };
const char* to_string(Objective o);
std::optional<Objective> parse_objective(const std::string& name);

// The best plan's costs at one size; nullopt where no plan fits at that size.
using SizeCost = std::optional<sim::RunCost>;

// Whether each size is on the time-cost front (false for sizes without a plan).
std::vector<bool> time_cost_front(const std::vector<SizeCost>& sizes);
// The size the objective picks; nullopt when no size has a plan.
std::optional<std::size_t> choose_size(const std::vector<SizeCost>& sizes, Objective objective);

}  // namespace stagecraft::planner
