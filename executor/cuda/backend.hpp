// CudaBackend: the Backend (executor/backend.hpp) on a CUDA device, fp32 — the oracle mode of the
// GPU executor. Model state is StageState over DeviceMemory (ZeRO rules shared with the host),
// units are LayerT<float, DeviceKernels> (the composition shared with the host), buffers and
// caches are device memory, all work is issued on one stream.
//
// Phase 1 semantics: every unit call and element move completes before it returns (the stream is
// synchronised), so the interpreter's host clock times each instruction's device work, and a
// receive or collective is never issued against unfinished data. The communication a plan needs
// beyond one rank is refused by the runner (no device communicator yet), as is tensor
// parallelism (the vocabulary-parallel head is host-only).
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "executor/backend.hpp"
#include "executor/cuda/device_kernels.hpp"
#include "executor/cuda/state_memory.hpp"
#include "executor/memory.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/stage_state.hpp"

namespace stagecraft::executor::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots);
  ~CudaBackend() override;

  Buffer alloc(int64_t elems) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void add(std::span<float> dst, std::span<const float> src) override;
  void fill(std::span<float> dst, float value) override;
  float read(std::span<const float> src, int64_t index) override;
  int64_t cache_bytes() const override;

  void init_params(uint64_t seed) override { state_->init_params(seed); }
  void init_params(ParamSource& source) override { state_->init_params(source); }
  std::span<float> params() override { return state_->params(); }
  std::span<float> grads() override { return state_->grads(); }
  std::span<float> shard_grads() override { return state_->shard_grads(); }
  std::span<float> persistent_grads() override { return state_->persistent_grads(); }
  void zero_grads() override { state_->zero_grads(); }
  double owned_grad_norm_sq() override { return state_->owned_grad_norm_sq(); }
  void optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override { state_->optimizer_step(cfg, step, clip); }
  void copy_grads_to_host() override { state_->copy_grads_to_host(); }
  void host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip) override {
    state_->host_optimizer_step(cfg, step, clip);
  }
  void copy_params_from_host() override { state_->copy_params_from_host(); }
  void release(Range r) override { state_->release(r); }
  Buffer pack_reduced_grads(const std::vector<Range>& ranges) override;
  void unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) override {
    state_->unpack_reduced_grads(ranges, values);
  }
  std::vector<float> owned_state() override { return state_->owned_state(); }
  void load_owned_state(std::span<const float> s) override { state_->load_owned_state(s); }
  void load_peer_shard(int64_t dp_index, std::span<const float> peer) override { state_->load_peer_shard(dp_index, peer); }
  int64_t owned_state_elems() const override { return state_->owned_state_elems(); }
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

 private:
  using Unit = LayerT<float, DeviceKernels>;
  const Unit& layer(int32_t chunk, int32_t unit) const;
  Unit::Cache& cache(int32_t chunk, int32_t unit, int64_t slot);
  void sync();

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<OpsContext> ops_;
  std::unique_ptr<DeviceKernels> kernels_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<StageState> state_;
  std::vector<std::vector<Unit>> layers_;               // [chunk][unit - chunk begin]
  std::vector<std::vector<Unit::Cache>> caches_;        // [slot][unit - chunk begin]
};

// Why this backend cannot run `plan` on any machine, or "": a world larger than one rank.
std::string plan_unsupported(const spec::Plan& plan);
// Why it cannot run `prog` on this machine, or "": plan_unsupported, or no device.
std::string cuda_unsupported(const program::Program& prog);

}  // namespace stagecraft::executor::cuda
