// CpuBackend: the Backend (backend.hpp) in host memory — StageState for the model state,
// LayerT<float, HostKernels> (Eigen, model/layers.hpp) for the units. It is the executor's oracle:
// what a device backend computes is checked against it. A bf16 Program's units round every value a
// GPU kernel stores (HostKernels::format, precision.hpp); the elements live in fp32 containers
// holding bf16 values, and the memory tracker counts them at 2 bytes.
#pragma once

#include <vector>

#include "executor/state_backend.hpp"
#include "executor/memory.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/stage_state.hpp"

namespace stagecraft::executor {

class CpuBackend : public StateBackend {
 public:
  // `slots`: micro-batch slots (virtual stages x micro-batches) whose caches it keeps.
  CpuBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots);

  Buffer alloc(int64_t elems) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void add(std::span<float> dst, std::span<const float> src) override;
  void fill(std::span<float> dst, float value) override;
  float read(std::span<const float> src, int64_t index) override;
  int64_t cache_bytes() const override;

  Buffer forward(int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> x,
                 bool input_only) override;
  void recompute(int32_t chunk, int32_t unit, int64_t slot) override;
  Buffer backward(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> dy, bool input_only) override;
  void backward_weight(int32_t chunk, int32_t unit, int64_t slot) override;
  Buffer finish_input_grad(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> d_a, int64_t row0) override;
  float finish_loss(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> reduced) override;
  Buffer cp_attention(CpPhase phase, int32_t chunk, int32_t unit, int64_t slot, const Dims& dims, std::span<const float> in,
                      bool flag) override;
  Buffer moe(MoePhase phase, int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> in,
             std::span<int64_t> counts, bool flag) override;
  void vocab_parallel_rescale(std::span<const float> local_stats, std::span<const float> global_max,
                              std::span<float> out) override;
  bool slot_idle(int64_t slot) const override;
  void clear_slot(int64_t slot) override;

 private:
  StageState& state() override { return state_; }
  const StageState& state() const override { return state_; }
  using Unit = LayerT<float, HostKernels>;
  const Unit& layer(int32_t chunk, int32_t unit) const;

 public:
  std::vector<int64_t> take_moe_routed(int32_t chunk, int32_t unit) override { return layer(chunk, unit).take_routed(); }
  std::vector<double> moe_loss_counts(int32_t chunk, int32_t unit, int64_t slot) override;
  void set_moe_loss_counts(int32_t chunk, int32_t unit, int64_t slot, std::span<const double> sums, int64_t ranks) override;

 private:
  UnitCache<float>& cache(int32_t chunk, int32_t unit, int64_t slot);

  const StageLayout& layout_;
  StageState state_;
  HostKernels kernels_;                     // rounding to the Program's storage format
  std::vector<std::vector<Unit>> layers_;  // [chunk][unit - chunk begin]
  // [slot][unit - chunk begin]; a slot's chunk is slot / micro_batches, so its caches are that
  // chunk's units.
  std::vector<std::vector<UnitCache<float>>> caches_;
};

}  // namespace stagecraft::executor
