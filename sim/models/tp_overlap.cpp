#include "sim/models/tp_overlap.hpp"

#include <algorithm>

namespace stagecraft::sim {

namespace {

using program::Op;
using program::UnitKind;

// Transformer Engine's userbuffers beside a block linear's GEMM (the header's three methods).
double te_overlapped_s(const TpOverlap& o, const TpOverlapGemms& g, Op op, bool backward, double T) {
  const double t = static_cast<double>(o.tp);
  const double margin = o.sm_count > kTpOverlapSms
                            ? static_cast<double>(o.sm_count) / static_cast<double>(o.sm_count - kTpOverlapSms)
                            : 1.0;
  if (op == Op::kTpAllGather) {
    // forward: before QKV / fc1; backward: the output gradient before the proj / fc2 dgrad
    const double gemm = backward ? g.row_s : g.column_s;
    return std::max(0.0, T - (t - 1) / t * gemm);
  }
  if (op != Op::kTpReduceScatter) return T;
  if (!backward) {  // after proj / fc2: pipeline
    const double n = kTpOverlapSplits, slowed = g.row_s * margin;
    return std::max(T / n, T - (n - 1) / n * slowed) + (slowed - g.row_s);
  }
  const double slowed = g.column_s * margin;  // the input gradient's, beside the QKV / fc1 wgrad: bulk
  return std::max(0.0, T - slowed) + (slowed - g.column_s);
}

}  // namespace

double tp_overlapped_s(const TpOverlap& o, UnitKind kind, Op op, bool backward, double T) {
  const bool block = kind == UnitKind::kAttention || kind == UnitKind::kMlp;
  const TpOverlapGemms& g = o.gemms[static_cast<std::size_t>(kind)];
  if (o.on && block) return te_overlapped_s(o, g, op, backward, T);
  // Megatron-LM's asynchronous backward collective beside the column-parallel wgrad GEMM: the
  // blocks' QKV / fc1 and the head's logits linear (also Megatron-LM's)
  const bool async = o.async_grad && backward && (block || kind == UnitKind::kHead) &&
                     (op == Op::kTpAllReduce || op == Op::kTpReduceScatter);
  if (!async || !(o.nccl_share < 1)) return T;
  // the GEMM loses f of its SMs while the collective runs: min(T, g) · f/(1 - f) longer
  const double g_s = g.column_s, share = o.nccl_share / (1 - o.nccl_share);
  return std::max(T - g_s, std::min(T, g_s) * share);
}

}  // namespace stagecraft::sim
