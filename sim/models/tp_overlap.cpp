#include "sim/models/tp_overlap.hpp"

#include <algorithm>

namespace stagecraft::sim {

double tp_overlapped_s(const TpOverlap& o, program::UnitKind kind, program::Op op, bool backward, double T) {
  if (!o.on || (kind != program::UnitKind::kAttention && kind != program::UnitKind::kMlp)) return T;
  const TpOverlapGemms& g = o.gemms[static_cast<std::size_t>(kind)];
  const double t = static_cast<double>(o.tp);
  const double margin = o.sm_count > kTpOverlapSms
                            ? static_cast<double>(o.sm_count) / static_cast<double>(o.sm_count - kTpOverlapSms)
                            : 1.0;
  if (op == program::Op::kTpAllGather) {
    // forward: before QKV / fc1; backward: the output gradient before the proj / fc2 dgrad
    const double gemm = backward ? g.row_s : g.column_s;
    return std::max(0.0, T - (t - 1) / t * gemm);
  }
  if (op == program::Op::kTpReduceScatter) {
    if (!backward) {  // after proj / fc2: pipeline
      const double n = kTpOverlapSplits, slowed = g.row_s * margin;
      return std::max(T / n, T - (n - 1) / n * slowed) + (slowed - g.row_s);
    }
    const double slowed = g.column_s * margin;  // the input gradient's, beside the QKV / fc1 wgrad: bulk
    return std::max(0.0, T - slowed) + (slowed - g.column_s);
  }
  return T;
}

}  // namespace stagecraft::sim
