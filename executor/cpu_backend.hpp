// CpuBackend: the Backend (backend.hpp) in host memory — StageState for the model state,
// Layer<float> (Eigen, model/layers.hpp) for the units. It is the executor's oracle: what a
// device backend computes is checked against it.
#pragma once

#include <vector>

#include "executor/backend.hpp"
#include "executor/memory.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/stage_state.hpp"

namespace stagecraft::executor {

class CpuBackend final : public Backend {
 public:
  // `slots`: micro-batch slots (virtual stages x micro-batches) whose caches it keeps.
  CpuBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots);

  Buffer alloc(int64_t elems) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void add(std::span<float> dst, std::span<const float> src) override;
  void fill(std::span<float> dst, float value) override;
  float read(std::span<const float> src, int64_t index) override;
  int64_t cache_bytes() const override;

  void init_params(uint64_t seed) override { state_.init_params(seed); }
  void init_params(ParamSource& source) override { state_.init_params(source); }
  std::span<float> params() override { return state_.params(); }
  std::span<float> grads() override { return state_.grads(); }
  std::span<float> shard_grads() override { return state_.shard_grads(); }
  std::span<float> persistent_grads() override { return state_.persistent_grads(); }
  void zero_grads() override { state_.zero_grads(); }
  double owned_grad_norm_sq() override { return state_.owned_grad_norm_sq(); }
  void optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override { state_.optimizer_step(cfg, step, clip); }
  void copy_grads_to_host() override { state_.copy_grads_to_host(); }
  void host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override {
    state_.host_optimizer_step(cfg, step, clip);
  }
  void copy_params_from_host() override { state_.copy_params_from_host(); }
  void release(Range r) override { state_.release(r); }
  Buffer pack_reduced_grads(const std::vector<Range>& ranges) override;
  void unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) override {
    state_.unpack_reduced_grads(ranges, values);
  }
  std::vector<float> owned_state() override { return state_.owned_state(); }
  void load_owned_state(std::span<const float> state) override { state_.load_owned_state(state); }
  void load_peer_shard(int64_t dp_index, std::span<const float> peer) override { state_.load_peer_shard(dp_index, peer); }
  int64_t owned_state_elems() const override { return state_.owned_state_elems(); }
  std::vector<float> params_host() override;

  Buffer forward(int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> x,
                 bool input_only) override;
  void recompute(int32_t chunk, int32_t unit, int64_t slot) override;
  Buffer backward(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> dy, bool input_only) override;
  void backward_weight(int32_t chunk, int32_t unit, int64_t slot) override;
  Buffer finish_input_grad(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> d_a, int64_t row0) override;
  float finish_loss(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> reduced) override;
  void vocab_parallel_rescale(std::span<const float> local_stats, std::span<const float> global_max,
                              std::span<float> out) override;
  bool slot_idle(int64_t slot) const override;
  void clear_slot(int64_t slot) override;

  const StageState& state() const { return state_; }

 private:
  const Layer<float>& layer(int32_t chunk, int32_t unit) const;
  UnitCache<float>& cache(int32_t chunk, int32_t unit, int64_t slot);

  const StageLayout& layout_;
  StageState state_;
  std::vector<std::vector<Layer<float>>> layers_;  // [chunk][unit - chunk begin]
  // [slot][unit - chunk begin]; a slot's chunk is slot / micro_batches, so its caches are that
  // chunk's units.
  std::vector<std::vector<UnitCache<float>>> caches_;
};

}  // namespace stagecraft::executor
