#include "core/program/comm_rules.hpp"

namespace stagecraft::program {

TpAround tp_collectives(UnitKind kind, Op op, bool sp, int64_t tokens, int64_t hidden, int64_t activation_bytes,
                        bool shared_experts) {
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
    case UnitKind::kMoe:
      if (!shared_experts) break;
      if (sp) out.before = gather;
      out.after = reduce;
      break;
    default:
      if (sp) out.before = gather;
      out.after = reduce;
      break;
  }
  return out;
}

CpShapes cp_shapes(const spec::Model& m, int64_t tp, int64_t w) {
  const int64_t d = m.head_dim(), q = m.heads / tp, k = m.kv_heads >= tp ? m.kv_heads / tp : 1;
  return {2 * k * d * w, (q + 2 * k) * d * w, q * d * w};
}

CpAround cp_collectives(UnitKind kind, Op op, spec::CpComm comm, int64_t cp, int64_t tokens, const CpShapes& sh) {
  CpAround out;
  if (cp <= 1 || kind != UnitKind::kAttention || op == Op::kBackwardWeight) return out;
  const bool forward = op == Op::kForward || op == Op::kRecompute;
  const CpCollective gather{Op::kCpAllGather, cp * tokens * sh.kv};
  const CpCollective reduce{Op::kCpReduceScatter, cp * tokens * sh.kv};
  switch (comm) {
    case spec::CpComm::kP2p:
      out.beside.push_back(gather);
      if (!forward) out.beside.push_back(reduce);
      break;
    case spec::CpComm::kAllGather:
      out.before.push_back(gather);
      if (!forward) out.after.push_back(reduce);
      break;
    case spec::CpComm::kA2a: {
      const CpCollective qkv{Op::kAllToAll, tokens * sh.qkv}, o{Op::kAllToAll, tokens * sh.out};
      out.before.push_back(forward ? qkv : o);
      out.after.push_back(forward ? o : qkv);
      break;
    }
  }
  return out;
}

}  // namespace stagecraft::program
