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

// The rules the schedules are built from, for the planner's bounds (which must not lower every
// candidate) and the schedules alike:
//   1F1B warm-up forwards min(p−i−1, m); micro-batches in flight at most min(p−i, m) (1F1B and ZB-H1);
//   interleaved warm-up min(2(p−i−1) + (v−1)p, m·v), m·v when m == p; its pass k on
//   chunk (k mod pv) div p (backward: v−1 minus that) of micro-batch (k div pv)·p + k mod p.
int64_t one_f_one_b_warmup(int64_t p, int64_t m, int64_t stage);
int64_t in_flight_limit(int64_t p, int64_t m, int64_t stage);
int64_t interleaved_warmup(int64_t p, int64_t m, int64_t v, int64_t stage);
Step interleaved_pass(Pass pass, int64_t k, int64_t p, int64_t v);
// Activation sets (one micro-batch on one chunk) a stage holds at once when its last warm-up
// forward starts (the first steady forward of 1F1B), counted per chunk (v entries), a lower bound
// on what the schedule holds at its peak: GPipe m on chunk 0; 1F1B and ZB-H1 min(p−i, m) on
// chunk 0; interleaved its first min(warm-up + 1, m·v) forward passes.
std::vector<int64_t> warmup_held_sets(spec::Schedule schedule, int64_t p, int64_t m, int64_t v, int64_t stage);

}  // namespace stagecraft::program
