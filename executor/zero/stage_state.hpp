// StageState: one rank's model state for its pipeline stage under ZeRO 0-3 — the buffers and
// the sharded AdamW step, laid out by StageLayout. No communication: the runner moves data
// between ranks and calls in here (zero/stage_layout.hpp has the position conventions).
//
//   params      the working buffer, padded N. ZeRO 0-2: every position valid. ZeRO-3 (dp > 1):
//               own shard and persistent positions valid; the rest holds NaN except while a
//               GatherParams has filled it, so computing with a parameter the Program did not
//               gather poisons the loss instead of silently using stale values.
//   grads       local accumulation over this step's micro-batches (Layer adds into it)
//   shard_grads ZeRO >= 1 with dp > 1 (or experts over edp > 1): this rank's reduced shard of the
//               gradients, packed as StageLayout::owned
//   persistent  ZeRO-3 (dp > 1): all-reduced gradients and replicated Adam state of the
//               persistent tensors, packed
//   m, v        Adam moments of the owned positions (StageLayout::owned, packed) (+ host copies of params and grads with
//               optimizer offload: the step then runs on those, as DeepSpeed's CPU Adam does)
//   master      mixed precision (layout.precision().mixed(): a bf16 Program): the fp32 master copy
//               of the owned positions and of the persistent tensors, which AdamW updates; `params`
//               then holds the 16-bit working copy, rounded from the masters after every step
//               (with optimizer offload the host copy of the parameters is the master). Gradients
//               stay fp32 (accumulated over the step's micro-batches), so do m and v.
// Memory is reported to the MemoryTracker as it is allocated. The buffers live in a StateMemory
// (state_memory.hpp): host memory unless the backend gives its device's; spans this class hands out
// point into that memory. The optimizer offload's copies (and then m, v) are always host memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "executor/memory.hpp"
#include "executor/model/adamw.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/state_memory.hpp"

namespace stagecraft::executor {

class StageState {
 public:
  // `forward_only` (a forward-only Program, which computes no gradient and takes no step): only
  // the parameters are allocated. `storage`: where the buffers live (host memory of its own when
  // null); it must outlive this object.
  StageState(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only = false,
             StateMemory* storage = nullptr);

  // Plan-independent initial values (ParamLayout::init) of the positions this rank keeps.
  void init_params(uint64_t seed);
  // The same positions from `source`, read tensor by tensor: a ZeRO-3 rank reads only its shard
  // and the persistent tensors, every other rank its stage's tensors (its tp shard of them).
  void init_params(ParamSource& source);

  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  StateMemory& storage() { return mem_; }
  std::span<float> grads() { return grads_; }
  std::span<float> chunk_params(int64_t c);
  std::span<float> chunk_grads(int64_t c);
  // Gradients are reduced into a shard (ZeRO >= 1, dp > 1) rather than kept whole.
  bool reduces_into_shard() const {
    const auto& owned = layout_.owned();
    return std::any_of(owned.begin(), owned.end(), [](const StageLayout::Owned& o) { return o.reduced; });
  }
  std::span<float> shard_grads() { return shard_grads_; }
  std::span<float> persistent_grads() { return persistent_grads_; }

  // The reduced gradients of `ranges` this rank holds — its shard's (ZeRO >= 1, dp > 1) and the
  // persistent tensors', or all (ZeRO-0) — packed in order into `out` (total(ranges) elements of
  // the storage's memory), 0 where it holds none; and back.
  void pack_reduced_grads(const std::vector<Range>& ranges, std::span<float> out);
  void unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values);

  // Start of a step: every gradient buffer to zero.
  void zero_grads();
  // Sum of squared gradients this rank owns for the global norm: its shard (ZeRO-0: its slice
  // of the all-reduced buffer), persistent tensors counted by their shard's owner, the tied
  // head's copy of the embedding table left out; 0 on every replica of a shard but the first
  // (hierarchical partitions: StageLayout::replica_index).
  double owned_grad_norm_sq();
  // AdamW on the owned positions (and the persistent tensors), gradients scaled by clip_scale.
  void optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale);
  // Optimizer offload: gradients to the host, AdamW there, updated parameters back.
  void copy_grads_to_host();
  void host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale);
  void copy_params_from_host();
  // ZeRO-3: drop a gathered range (NaN on the positions this rank does not keep).
  void release(Range r);
  // `delta` (|r| values) added to the positions of r this rank steps — its owned ones (the masters
  // and the working copy) and the persistent ones — for a parameter moved by a rule of its own
  // rather than its gradient (the expert biases of bias-based balancing). Every other rank holding
  // the parameter gets it from the step's gathers, or adds the same delta itself.
  void nudge(Range r, std::span<const float> delta);

  // ---- checkpoint: what this rank alone owns -----------------------------------------------------
  // Parameters of the owned positions (packed), Adam m and v, then the persistent tensors' values, m and v.
  std::vector<float> owned_state();
  void load_owned_state(std::span<const float> state);
  // ZeRO 1-2: shard `shard` of partition set `set` (StageLayout::partition_sets; a peer of the set's
  // group holds it), from its owner's checkpoint (first values of its state, packed as owned()).
  void load_peer_shard(int64_t set, int64_t shard, std::span<const float> peer_state);
  int64_t owned_state_elems() const;

  const StageLayout& layout() const { return layout_; }

 private:
  // Where this rank keeps the reduced gradient of each piece of `ranges`, in position order: a
  // span of the storage, or an empty span of `size` positions it keeps none of.
  struct Piece {
    std::span<float> where;
    int64_t size = 0;
  };
  std::vector<Piece> reduced_pieces(const std::vector<Range>& ranges);
  void finish_init();
  // Owned positions that are not persistent (the persistent ones step separately), each with its
  // place in the packed buffers.
  std::vector<StageLayout::Owned> sharded_ranges() const;
  // The values AdamW updates for owned flat range `flat` (packed at `packed`): the masters, or the
  // working copy itself (fp32 without offload); and its reduced gradients (StageLayout::Owned::reduced:
  // the packed shard gradients, else the local buffer).
  std::span<float> opt_values(Range flat, int64_t packed);
  std::span<float> reduced_grads(Range flat, int64_t packed, bool reduced);
  void step_persistent(const AdamWConfig& cfg, int64_t step, float clip_scale);
  void step_ranges(const AdamWConfig& cfg, int64_t step, float clip_scale, bool on_host);
  // Mixed precision: the working copy of the sharded (or persistent) ranges from the masters.
  void refresh_working_sharded();
  void refresh_working(Range r, int64_t packed);  // one range of it
  void refresh_working_persistent();
  // The packed fp32 masters AdamW updates (empty where it updates the working copy: fp32 without
  // offload), and their memory.
  std::span<float> opt_masters();
  StateMemory& opt_master_memory() { return offload_ ? static_cast<StateMemory&>(host_) : mem_; }
  std::span<float> persistent_values(const Range& r);

  const StageLayout& layout_;
  bool offload_ = false;
  MemoryTracker& memory_;
  std::unique_ptr<StateMemory> own_storage_;  // when the caller gave none
  StateMemory& mem_;
  HostMemory host_;  // the optimizer offload's buffers
  std::span<float> params_, grads_, shard_grads_;
  std::span<float> m_, v_;  // in host_ with optimizer offload
  std::span<float> persistent_grads_, persistent_m_, persistent_v_;
  std::span<float> host_params_, host_grads_;
  Format store_ = Format::kFp32;
  std::span<float> master_, persistent_master_;  // mixed precision (host_params_ is the master with offload)
};

}  // namespace stagecraft::executor
