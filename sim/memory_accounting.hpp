// Memory accounting of a simulated rank: what it holds for the whole step (model states,
// communication buffers, reserved), and what its instructions allocate and free as they start
// and end (amounts from models/memory.hpp):
//   Forward        allocates, at its start, the activations its units keep (under the plan's
//                  recompute mode) for a micro-batch: T · Σ activation_bytes_per_token
//   Recompute      allocates, at its start, the full activations of its blocks (recompute none)
//   Backward       frees, at its end, what the Forward (and a Recompute) of its units allocated;
//                  with zero-bubble (ZB-H1) BackwardWeight frees them instead
//   GatherParams   allocates, at its start, the gathered bucket (buffers): elems · w, w the
//                  parameter bytes (the second level of MiCS's hierarchical gather, over kDpLocal,
//                  fills what the first allocated); ReleaseParams frees it. A quantized gather
//                  (qwZ) also holds its wire buffer, `bytes` (int8 values and fp32 scales), from its
//                  start to its end, beside the dequantized bucket
// The changes are taken in time order, frees before allocations at equal times, then by
// instruction id, so the samples (and the peak read from them) do not depend on the order in
// which simultaneous, folded or eagerly completed instructions are processed. The samples are
// the running totals, one per change; the peak is the largest of them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "core/trace/memory.hpp"

namespace stagecraft::sim {

// The parameters a stage's ranks hold: the sum over its chunks (tensor-parallel shards).
int64_t stage_params(const program::Program& prog, int64_t stage);

// Model states, communication buffers and reserved bytes of a stage's ranks.
trace::MemoryBytes stage_static_memory(const program::Program& prog, int64_t stage, const spec::Cluster& cluster);

struct MemoryDelta {
  int64_t activations = 0;
  int64_t buffers = 0;
};

// Which instructions change memory, and by how much.
class MemoryRules {
 public:
  // Activations as the training runs on `cluster` (its attention: effective_training).
  MemoryRules(const program::Program& prog, const spec::Cluster& cluster);
  // False when the instruction changes nothing at that moment (inline: on the simulator's hot path).
  bool at_start(const program::Instr& in, MemoryDelta& d) const {
    using program::Op;
    // a MoE unit's pass split around its all-to-alls: its other compute keeps and frees the
    // unit's activations (the experts' included), once
    if (in.flags & program::kFlagExperts) return false;
    switch (in.op) {
      case Op::kForward:
        d = {static_cast<int64_t>(tokens_ * (act_prefix_[in.unit_end] - act_prefix_[in.unit_begin])), 0};
        return true;
      case Op::kRecompute:
        d = {static_cast<int64_t>(tokens_ * (act_full_prefix_[in.unit_end] - act_full_prefix_[in.unit_begin])), 0};
        return true;
      case Op::kGatherParams:
        d = {0, (in.group == program::Group::kDpLocal ? 0 : in.elems * param_bytes_) +
                    ((in.flags & program::kFlagQuantized) ? in.bytes : 0)};
        return true;
      default: return false;
    }
  }
  bool at_end(const program::Instr& in, MemoryDelta& d) const {
    using program::Op;
    if (in.flags & program::kFlagExperts) return false;
    if ((in.op == Op::kBackward && !zero_bubble_) || in.op == Op::kBackwardWeight) {
      d = {-freed_at_backward(in), 0};
      return true;
    }
    if (in.op == Op::kReleaseParams) {
      d = {0, -in.elems * param_bytes_};
      return true;
    }
    if (in.op == Op::kGatherParams && (in.flags & program::kFlagQuantized)) {
      d = {0, -in.bytes};
      return true;
    }
    return false;
  }

 private:
  int64_t freed_at_backward(const program::Instr& in) const;

  int64_t param_bytes_ = 2;
  std::vector<double> act_prefix_, act_full_prefix_;  // activation bytes per token, prefix over units
  double tokens_ = 0;                                 // per micro-batch
  int32_t head_ = 0;
  bool full_recompute_ = false;
  bool zero_bubble_ = false;                          // activations are freed by BackwardWeight
};

class RankMemory {
 public:
  void reserve(std::size_t changes) { changes_.reserve(changes); }
  // Inserted in order; a change processed early (folded or eagerly completed) moves back past
  // the few changes it precedes.
  void change(int64_t time_ns, const MemoryDelta& d, int32_t instr) {
    const Change c{time_ns, d, instr};
    changes_.push_back(c);
    std::size_t i = changes_.size() - 1;
    while (i > 0 && c.before(changes_[i - 1])) {
      changes_[i] = changes_[i - 1];
      --i;
    }
    changes_[i] = c;
  }
  // The running totals from `start` (the static bytes), one sample per change, in time order:
  // f(sample) for each.
  template <typename F>
  void for_each_sample(int64_t rank, const trace::MemoryBytes& start, F&& f) const {
    trace::MemorySample m{rank, 0, -1, start};
    f(m);
    for (const Change& c : changes_) {
      m.time_ns = c.time_ns;
      m.instr = c.instr;
      m.bytes[trace::MemoryKind::kActivations] += c.delta.activations;
      m.bytes[trace::MemoryKind::kBuffers] += c.delta.buffers;
      f(m);
    }
  }

 private:
  struct Change {
    int64_t time_ns = 0;
    MemoryDelta delta;
    int32_t instr = -1;
    bool frees() const { return delta.activations + delta.buffers < 0; }
    // (time, frees first, instruction id): the order the totals are taken in
    bool before(const Change& o) const {
      if (time_ns != o.time_ns) return time_ns < o.time_ns;
      if (frees() != o.frees()) return frees();
      return instr < o.instr;
    }
  };
  std::vector<Change> changes_;
};

}  // namespace stagecraft::sim
