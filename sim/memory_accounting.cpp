#include "sim/memory_accounting.hpp"

#include <algorithm>

#include "core/program/comm_rules.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::sim {

using program::Instr;
using program::Op;
using trace::MemoryKind;

trace::MemoryBytes stage_static_memory(const program::Program& prog, int64_t stage, const spec::Cluster& cluster) {
  const spec::ZeroConfig& z = prog.plan.zero;
  const program::Placement& pl = prog.placement;
  int64_t stage_params = 0, persistent = 0;
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) stage_params += prog.chunk(stage, c).params;
  for (const program::Bucket& b : prog.param_buckets) {
    if (b.stage == stage && z.stage == 3) persistent += b.persistent_elems;
  }
  const ModelStates ms = model_states(stage_params, persistent, z, pl.dp, prog.training.dtype);
  const int64_t message = program::p2p_message_bytes(prog.tokens_per_micro_batch(), prog.model.hidden, prog.plan.tp,
                                                     prog.activation_bytes);
  trace::MemoryBytes m;
  m[MemoryKind::kParams] = ms.params;
  m[MemoryKind::kGrads] = ms.grads;
  m[MemoryKind::kOptimizer] = ms.optimizer;
  m[MemoryKind::kBuffers] = comm_buffer_bytes(message, pl.pp, z, pl.dp, stage_params, prog.param_bytes);
  m[MemoryKind::kReserved] = cluster.gpu.reserved_bytes;
  return m;
}

MemoryRules::MemoryRules(const program::Program& prog)
    : prog_(prog),
      tokens_(static_cast<double>(prog.tokens_per_micro_batch())),
      head_(program::head_unit(prog.model)),
      full_recompute_(prog.plan.recompute == spec::Recompute::kFull),
      zero_bubble_(prog.plan.schedule == spec::Schedule::kZbH1) {
  const std::vector<program::Unit> units = program::model_units(prog.model, prog.plan.tp);
  act_prefix_.assign(units.size() + 1, 0);
  act_full_prefix_.assign(units.size() + 1, 0);
  for (std::size_t u = 0; u < units.size(); ++u) {
    act_prefix_[u + 1] = act_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan, prog.training.dtype,
                                                                      prog.plan.recompute);
    act_full_prefix_[u + 1] = act_full_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan,
                                                                                prog.training.dtype, spec::Recompute::kNone);
  }
}

bool MemoryRules::at_start(const Instr& in, MemoryDelta& d) const {
  switch (in.op) {
    case Op::kForward:
      d = {static_cast<int64_t>(tokens_ * (act_prefix_[in.unit_end] - act_prefix_[in.unit_begin])), 0};
      return true;
    case Op::kRecompute:
      d = {static_cast<int64_t>(tokens_ * (act_full_prefix_[in.unit_end] - act_full_prefix_[in.unit_begin])), 0};
      return true;
    case Op::kGatherParams: d = {0, in.bytes}; return true;
    default: return false;
  }
}

bool MemoryRules::at_end(const Instr& in, MemoryDelta& d) const {
  if ((in.op == Op::kBackward && !zero_bubble_) || in.op == Op::kBackwardWeight) {
    double bytes = act_prefix_[in.unit_end] - act_prefix_[in.unit_begin];
    if (full_recompute_) {
      // what Recompute re-created for these units (blocks only; embedding and head are not recomputed)
      const int32_t b = std::max(in.unit_begin, 1), e = std::min(in.unit_end, head_);
      if (b < e) bytes += act_full_prefix_[e] - act_full_prefix_[b];
    }
    d = {-static_cast<int64_t>(tokens_ * bytes), 0};
    return true;
  }
  if (in.op == Op::kReleaseParams) {
    d = {0, -in.elems * prog_.param_bytes};
    return true;
  }
  return false;
}

void RankMemory::change(int64_t time_ns, const MemoryDelta& d, int32_t instr) { changes_.push_back({time_ns, d, instr}); }

std::vector<trace::MemorySample> RankMemory::samples(int64_t rank, const trace::MemoryBytes& start) const {
  std::vector<trace::MemorySample> out;
  out.reserve(changes_.size() + 1);
  trace::MemorySample m{rank, 0, -1, start};
  out.push_back(m);
  std::vector<Change> ordered = changes_;
  std::sort(ordered.begin(), ordered.end(), [](const Change& a, const Change& b) { return a.before(b); });
  for (const Change& c : ordered) {
    m.time_ns = c.time_ns;
    m.instr = c.instr;
    m.bytes[MemoryKind::kActivations] += c.delta.activations;
    m.bytes[MemoryKind::kBuffers] += c.delta.buffers;
    out.push_back(m);
  }
  return out;
}

}  // namespace stagecraft::sim
