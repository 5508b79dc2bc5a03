// Pipeline schedules: the order in which each stage runs its forward and backward passes over
// (virtual chunk, micro-batch). They exist only here; lowering expands each step into
// instructions. p stages, m micro-batches, v virtual chunks per stage, stage index i (0-based).
//   GPipe        all m forwards, then all m backwards; holds m micro-batches' activations.
//   1F1B         (PipeDream-Flush) min(p-i-1, m) warm-up forwards, then one forward / one
//                backward pairs, then the remaining backwards; holds min(p-i, m).
//   interleaved  Megatron-LM's interleaved 1F1B (Narayanan et al., SC'21): m*v chunk passes,
//                warm-up min(2(p-i-1) + (v-1)p, m*v) forwards (all of them when m == p);
//                forward pass k runs chunk (k mod pv) div p on micro-batch (k div pv)*p + k mod p,
//                backward pass k the chunk v-1-(k mod pv) div p.
//   ZB-H1        (Qi et al., ICLR'24) backward split into B (input grads) and W (weight grads);
//                1F1B's order of F and B with W deferred to fill idle time, while a stage never
//                holds more than min(p-i, m) micro-batches whose W is pending (1F1B's memory).
//                Built by list-scheduling all stages with T_F = T_B = T_W (one unit each).
#pragma once

#include <cstdint>
#include <vector>

#include "core/spec/plan.hpp"

namespace stagecraft::program {

enum class Pass : uint8_t { kForward, kBackward, kBackwardInput, kBackwardWeight };

struct Step {
  Pass pass = Pass::kForward;
  int32_t chunk = 0;
  int32_t mb = 0;
};

std::vector<Step> gpipe_steps(int64_t p, int64_t m, int64_t stage);
std::vector<Step> one_f_one_b_steps(int64_t p, int64_t m, int64_t stage);
std::vector<Step> interleaved_steps(int64_t p, int64_t m, int64_t v, int64_t stage);
// Every stage's ZB-H1 order at once (the list schedule couples the stages).
std::vector<std::vector<Step>> zb_h1_steps(int64_t p, int64_t m);

// Every stage's steps for a plan's schedule.
std::vector<std::vector<Step>> schedule_steps(const spec::Plan& plan);

}  // namespace stagecraft::program
