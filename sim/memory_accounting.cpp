#include "sim/memory_accounting.hpp"

#include <algorithm>

#include "core/program/comm_rules.hpp"
#include "core/program/zero.hpp"
#include "sim/models/memory.hpp"
#include "sim/models/work.hpp"

namespace stagecraft::sim {

using program::Instr;
using program::Op;
using trace::MemoryKind;

int64_t stage_params(const program::Program& prog, int64_t stage) {
  int64_t n = 0;
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) n += prog.chunk(stage, c).params;
  return n;
}

trace::MemoryBytes stage_static_memory(const program::Program& prog, int64_t stage, const spec::Cluster& cluster) {
  const spec::ZeroConfig& z = prog.plan.zero;
  const program::Placement& pl = prog.placement;
  const int64_t stage_params = sim::stage_params(prog, stage);
  int64_t persistent = 0, blocks = 0;
  const auto held = program::shared_model_units(prog.model, prog.plan.tp, prog.plan.ep, prog.plan.etp);
  const std::vector<program::Unit>& units = *held;
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) {
    const program::ChunkInfo& chunk = prog.chunk(stage, c);
    // a block is two units (attention, MLP); count it at its attention unit
    for (int32_t u = chunk.unit_begin; u < chunk.unit_end; ++u) blocks += units[static_cast<std::size_t>(u)].kind == program::UnitKind::kAttention;
  }
  for (const program::Bucket& b : prog.param_buckets) {
    if (b.stage == stage && z.stage == 3) persistent += b.persistent_elems;
  }
  const int64_t partition = spec::partition_group(z, pl.dp);
  // routed experts held apart (program::Bucket::experts) are partitioned over their own group
  int64_t expert_params = 0;
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) expert_params += prog.chunk(stage, c).expert_params;
  ModelStates ms = model_states(stage_params - expert_params, persistent, z, partition, prog.training.dtype);
  if (expert_params > 0) {
    const ModelStates ex = model_states(expert_params, 0, z, prog.plan.expert_dp(), prog.training.dtype);
    ms.params += ex.params;
    ms.grads += ex.grads;
    ms.optimizer += ex.optimizer;
  }
  const int64_t message = program::p2p_message_bytes(prog.tokens_per_micro_batch(), prog.model.hidden, prog.plan.tp,
                                                     prog.activation_bytes);
  trace::MemoryBytes m;
  m[MemoryKind::kParams] = ms.params + fp8_state_bytes(prog.model, prog.plan.tp, blocks, prog.training.dtype) +
                           hpz_secondary_bytes(stage_params - persistent, z, pl.dp, prog.param_bytes);
  // a forward-only Program (scoring) computes no gradient and keeps no optimizer state
  // ZeRO-2/3 keep a bucket of a table tied over stages whole for the step, beside its shard
  // (program::holds_tied_table): (elems - ceil(elems / dp)) more gradient elements
  int64_t tied_whole = 0;
  for (const program::Bucket& b : prog.grad_buckets) {
    if (z.stage >= 2 && b.stage == stage && program::holds_tied_table(prog.model, pl.pp, b)) {
      tied_whole += b.elems - program::shard_elems(b.elems, partition);
    }
  }
  m[MemoryKind::kGrads] = prog.forward_only ? 0 : ms.grads + tied_whole * prog.param_bytes;
  m[MemoryKind::kOptimizer] = prog.forward_only ? 0 : ms.optimizer;
  m[MemoryKind::kBuffers] = comm_buffer_bytes(message, pl.pp, z, pl.dp, stage_params, prog.param_bytes);
  m[MemoryKind::kReserved] = cluster.gpu.reserved_bytes;
  return m;
}

MemoryRules::MemoryRules(const program::Program& prog, const spec::Cluster& cluster)
    : param_bytes_(prog.param_bytes),
      tokens_(static_cast<double>(prog.tokens_per_micro_batch())),
      head_(program::head_unit(prog.model)),
      full_recompute_(prog.plan.recompute == spec::Recompute::kFull),
      zero_bubble_(prog.plan.schedule == spec::Schedule::kZbH1) {
  const auto held = program::shared_model_units(prog.model, prog.plan.tp, prog.plan.ep, prog.plan.etp);
  const std::vector<program::Unit>& units = *held;
  const spec::Training training = effective_training(prog.training, cluster);
  act_prefix_.assign(units.size() + 1, 0);
  act_full_prefix_.assign(units.size() + 1, 0);
  for (std::size_t u = 0; u < units.size(); ++u) {
    act_prefix_[u + 1] = act_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan, training,
                                                                      prog.plan.recompute);
    act_full_prefix_[u + 1] = act_full_prefix_[u] + activation_bytes_per_token(units[u], prog.model, prog.plan,
                                                                                training, spec::Recompute::kNone);
  }
}

// What a Backward (or BackwardWeight with zero-bubble) frees: its units' activations, and what
// Recompute re-created for them (blocks only; embedding and head are not recomputed).
int64_t MemoryRules::freed_at_backward(const Instr& in) const {
  double bytes = act_prefix_[in.unit_end] - act_prefix_[in.unit_begin];
  if (full_recompute_) {
    const int32_t b = std::max(in.unit_begin, 1), e = std::min(in.unit_end, head_);
    if (b < e) bytes += act_full_prefix_[e] - act_full_prefix_[b];
  }
  return static_cast<int64_t>(tokens_ * bytes);
}

}  // namespace stagecraft::sim
