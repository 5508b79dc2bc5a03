// Communication rules of lowering, in one place for the lowering itself and for the planner's
// bounds (which time candidates without lowering them): the bytes of a pipeline message and of
// a tensor-parallel collective, and which tensor-parallel collectives a unit's pass issues.
// T = tokens of a micro-batch, h hidden, t tp, w bytes per activation element.
//   pipeline message     T·h/t·w: with t > 1 each tp rank sends 1/t of the activation —
//                        sequence-parallel activations are split already; otherwise Megatron-LM's
//                        scatter-gather, the receiver all-gathering the pieces over tp
//                        (Narayanan et al., SC'21, §4.1)
//   tp collective        S = T·h·w, the whole activation (nccl-tests' S)
//   vocab-parallel loss  S = 12·T: Megatron-LM's VocabParallelCrossEntropy all-reduces, per
//                        token, the logits' max, the sum of exponentials and the target logit, in
//                        fp32 — three all-reduces of 4·T bytes, modelled as one of their sum
// Tensor-parallel collectives around one unit's pass (Megatron-LM's f/g operators, Shoeybi et
// al. 2019; with sequence parallelism an all-gather before and a reduce-scatter after instead of
// the all-reduce, Korthikanti et al., MLSys'23):
//   unit        forward (and recompute)            backward (and backward-input)
//   embedding   after: all-reduce (sp: RS)         before: sp AG
//   attention,  before: sp AG;                     before: sp AG;
//   MLP         after: all-reduce (sp: RS)         after: all-reduce (sp: RS)
//   head        before: sp AG; after: the loss's   after: all-reduce (sp: RS)
//               all-reduce
// The weight-gradient pass (zero-bubble W) issues none.
#pragma once

#include <cstdint>
#include <optional>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"

namespace stagecraft::program {

// The gradient-norm all-reduce after the last backward: one fp32 sum of squares per rank.
inline constexpr int64_t kGradNormBytes = 4;
inline constexpr int64_t kVocabParallelLossBytesPerToken = 12;

inline int64_t p2p_message_bytes(int64_t tokens, int64_t hidden, int64_t tp, int64_t activation_bytes) {
  return tokens * hidden / tp * activation_bytes;
}
inline int64_t tp_collective_bytes(int64_t tokens, int64_t hidden, int64_t activation_bytes) {
  return tokens * hidden * activation_bytes;
}
// Scatter-gather: a received activation (or gradient) is all-gathered over tp before use.
inline bool gathers_received_message(int64_t tp, bool sequence_parallel) { return tp > 1 && !sequence_parallel; }

struct TpCollective {
  Op op = Op::kTpAllReduce;
  int64_t bytes = 0;
};
struct TpAround {
  std::optional<TpCollective> before, after;
};
// The collectives a pass `op` (Forward, Recompute, Backward, BackwardInput, BackwardWeight) of a
// unit of `kind` issues when tp > 1.
TpAround tp_collectives(UnitKind kind, Op op, bool sequence_parallel, int64_t tokens, int64_t hidden,
                        int64_t activation_bytes);

}  // namespace stagecraft::program
