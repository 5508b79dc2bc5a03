// Memory accounting of a simulated rank: what it holds for the whole step (model states,
// communication buffers, reserved), and what its instructions allocate and free as they start
// and end (amounts from models/memory.hpp):
//   Forward        allocates, at its start, the activations its units keep (under the plan's
//                  recompute mode) for a micro-batch: T · Σ activation_bytes_per_token
//   Recompute      allocates, at its start, the full activations of its blocks (recompute none)
//   Backward       frees, at its end, what the Forward (and a Recompute) of its units allocated;
//                  with zero-bubble (ZB-H1) BackwardWeight frees them instead
//   GatherParams   allocates, at its start, the gathered bucket (buffers); ReleaseParams frees it
// The changes are taken in time order, frees before allocations at equal times, then by
// instruction id, so the samples (and the peak read from them) do not depend on the order in
// which simultaneous, folded or eagerly completed instructions are processed. The samples are the running totals, one per
// change.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "core/trace/memory.hpp"

namespace stagecraft::sim {

// Model states, communication buffers and reserved bytes of a stage's ranks.
trace::MemoryBytes stage_static_memory(const program::Program& prog, int64_t stage, const spec::Cluster& cluster);

struct MemoryDelta {
  int64_t activations = 0;
  int64_t buffers = 0;
};

// Which instructions change memory, and by how much.
class MemoryRules {
 public:
  explicit MemoryRules(const program::Program& prog);
  // False when the instruction changes nothing at that moment.
  bool at_start(const program::Instr& in, MemoryDelta& d) const;
  bool at_end(const program::Instr& in, MemoryDelta& d) const;

 private:
  const program::Program& prog_;
  std::vector<double> act_prefix_, act_full_prefix_;  // activation bytes per token, prefix over units
  double tokens_ = 0;                                 // per micro-batch
  int32_t head_ = 0;
  bool full_recompute_ = false;
  bool zero_bubble_ = false;                          // activations are freed by BackwardWeight
};

class RankMemory {
 public:
  void reserve(std::size_t changes) { changes_.reserve(changes); }
  void change(int64_t time_ns, const MemoryDelta& d, int32_t instr);
  // The running totals from `start` (the static bytes), one sample per change, in time order.
  std::vector<trace::MemorySample> samples(int64_t rank, const trace::MemoryBytes& start) const;

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
