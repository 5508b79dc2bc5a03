// CudaBackend: the Backend (executor/backend.hpp) on a CUDA device. Model state is StageState over
// DeviceMemory (ZeRO rules shared with the host), units are LayerT<float, DeviceKernels> (the
// composition shared with the host), buffers and caches are device memory, all work is issued on
// one stream. An fp32 Program runs in fp32; a bf16 or fp16 one as the CPU backend runs it
// (precision.hpp): fp32 masters and Adam state, the working parameters rounded from them after
// every step, every store the CPU oracle rounds rounded on the device, the linear layers' GEMMs on
// the tensor cores with fp32 accumulation. Its 16-bit values are held in fp32 storage: the
// arithmetic of a bf16 run, not yet its memory (cache_bytes counts what the device holds) or speed.
//
// Issue is asynchronous: unit calls, element moves and the model state's updates are enqueued on
// the one compute stream and return; what the host reads (read(), a loss, host copies) waits for
// the stream, and finish_step() waits for all of it. Device memory is ordered on the same stream
// (buffers.hpp acquire_device_stream), and the NCCL transport orders each operation after the work
// enqueued before it (order_after_device_stream), so a collective posted after a compute reads what
// the compute wrote. The trace's times come from the device's event clock (event_clock.hpp). Plans
// of several ranks run over NCCL (nccl_communicator.hpp); tensor parallelism is refused (the
// vocabulary-parallel head is host-only).
#pragma once

#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "executor/state_backend.hpp"
#include "executor/cuda/device_kernels.hpp"
#include "executor/cuda/state_memory.hpp"
#include "executor/memory.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/stage_state.hpp"

namespace stagecraft::executor::cuda {

class CudaBackend final : public StateBackend {
 public:
  CudaBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots);
  ~CudaBackend() override;

  Buffer alloc(int64_t elems) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void add(std::span<float> dst, std::span<const float> src) override;
  void fill(std::span<float> dst, float value) override;
  float read(std::span<const float> src, int64_t index) override;
  int64_t cache_bytes() const override;
  // The device's event clock (event_clock.hpp); label_next closes the last instruction's events on
  // the stream and opens the next one's.
  InstrClock* clock() override;
  void label_next(int32_t instr) override;
  void finish_step() override;

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
  StageState& state() override { return *state_; }
  const StageState& state() const override { return *state_; }
  const Unit& layer(int32_t chunk, int32_t unit) const;
  Unit::Cache& cache(int32_t chunk, int32_t unit, int64_t slot);
  void sync();

  cudaStream_t stream_ = nullptr;
  int32_t labelled_ = -1;  // the instruction whose work is being enqueued (label_next)
  std::unique_ptr<OpsContext> ops_;
  std::unique_ptr<DeviceKernels> kernels_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<StageState> state_;
  std::vector<std::vector<Unit>> layers_;               // [chunk][unit - chunk begin]
  std::vector<std::vector<Unit::Cache>> caches_;        // [slot][unit - chunk begin]
};

// Why this backend cannot run `plan` on any machine, or "" ("/field: reason"): tensor or context
// parallelism, ZeRO++'s quantized collectives. Plans of several ranks run over NCCL
// (nccl_communicator.hpp), one rank per GPU.
std::string plan_unsupported(const spec::Plan& plan);
// Why it cannot run `prog` on this machine, or "": plan_unsupported, or no device.
std::string cuda_unsupported(const program::Program& prog);

}  // namespace stagecraft::executor::cuda
