#include "core/program/comm_rules.hpp"

namespace stagecraft::program {

TpAround tp_collectives(UnitKind kind, Op op, bool sp, int64_t tokens, int64_t hidden, int64_t activation_bytes) {
  TpAround out;
  if (op == Op::kBackwardWeight) return out;
  const int64_t S = tp_collective_bytes(tokens, hidden, activation_bytes);
  const TpCollective gather{Op::kTpAllGather, S};
  const TpCollective reduce{sp ? Op::kTpReduceScatter : Op::kTpAllReduce, S};
  const bool forward = op == Op::kForward || op == Op::kRecompute;
  switch (kind) {
    case UnitKind::kEmbedding:
      if (forward) out.after = reduce;
      else if (sp) out.before = gather;
      break;
    case UnitKind::kHead:
      if (sp && forward) out.before = gather;
      if (forward) out.after = TpCollective{Op::kTpAllReduce, kVocabParallelLossBytesPerToken * tokens};
      else out.after = reduce;
      break;
    default:
      if (sp) out.before = gather;
      out.after = reduce;
      break;
  }
  return out;
}

}  // namespace stagecraft::program
