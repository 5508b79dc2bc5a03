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

bool block(UnitKind kind) { return kind == UnitKind::kAttention || kind == UnitKind::kMlp; }

// Megatron-LM's asynchronous backward collective beside the column-parallel wgrad GEMM: the
// blocks' QKV / fc1 and the head's logits linear (also Megatron-LM's).
bool async_applies(const TpOverlap& o, UnitKind kind, Op op, bool backward) {
  return o.async_grad && backward && (block(kind) || kind == UnitKind::kHead) &&
         (op == Op::kTpAllReduce || op == Op::kTpReduceScatter);
}

}  // namespace

double nccl_sm_fraction(const spec::Cluster& cluster) {
  if (cluster.gpu.sm_count <= 0) return 0.0;
  return static_cast<double>(std::min(cluster.nccl.channels, cluster.gpu.sm_count)) /
         static_cast<double>(cluster.gpu.sm_count);
}

TpOverlap tp_overlap_modes(const spec::Training& training, const spec::Plan& plan) {
  TpOverlap o;
  o.on = training.tp_comm_overlap && plan.sequence_parallel && plan.tp > 1;
  o.async_grad = training.framework_profile().tp_grad_overlap && plan.tp > 1;
  o.tp = plan.tp;
  return o;
}

bool tp_overlapped(const TpOverlap& o, UnitKind kind, Op op, bool backward) {
  if (o.on && block(kind)) return op == Op::kTpAllGather || op == Op::kTpReduceScatter;
  return async_applies(o, kind, op, backward);
}

double tp_overlapped_s(const TpOverlap& o, UnitKind kind, Op op, bool backward, double T) {
  const TpOverlapGemms& g = o.gemms[static_cast<std::size_t>(kind)];
  if (o.on && block(kind)) return te_overlapped_s(o, g, op, backward, T);
  if (!async_applies(o, kind, op, backward) || !(o.nccl_share < 1)) return T;
  // the GEMM loses f of its SMs while the collective runs: min(T, g) · f/(1 - f) longer
  const double g_s = g.column_s, share = o.nccl_share / (1 - o.nccl_share);
  return std::max(T - g_s, std::min(T, g_s) * share);
}

}  // namespace stagecraft::sim
