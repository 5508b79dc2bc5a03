// DeviceMemory: StageState's buffers in GPU memory (a StateMemory, zero/state_memory.hpp). Every
// operation runs on one stream in the order it is called; host copies wait for it, so StageState
// sees the same sequential semantics as with host memory. AdamW is bit for bit the host's; the
// sum of squares is a fixed-order reduction (run to run identical, not the host's order); the
// 16-bit working copy is rounded from the masters on the device.
#pragma once

#include <deque>
#include <map>
#include <tuple>
#include <utility>

#include <cuda_runtime_api.h>

#include "executor/cuda/buffers.hpp"
#include "executor/zero/state_memory.hpp"

namespace stagecraft::executor::cuda {

class DeviceMemory final : public StateMemory {
 public:
  // `stream`: where the work is enqueued (the default stream when null).
  explicit DeviceMemory(cudaStream_t stream = nullptr);
  ~DeviceMemory() override;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  std::span<float> allocate(int64_t elems) override;
  void fill(std::span<float> dst, float value) override;
  void copy(std::span<float> dst, std::span<const float> src) override;
  void adamw(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
             float grad_scale) override;
  void add_sum_sq(std::span<const float> values, double& sum) override;
  void download(std::span<const float> src, std::span<float> host) override;
  void upload(std::span<const float> host, std::span<float> dst) override;
  // On the device (kernels/elementwise.hpp round16): bit for bit the host's rounding.
  void round_copy(std::span<float> dst, std::span<const float> src, Format f) override;

  cudaStream_t stream() const { return stream_; }

 private:
  struct DecayedRanges {
    int64_t* ranges = nullptr;  // device memory: [begin, end) pairs
    int64_t count = 0;
  };
  const DecayedRanges& decayed_ranges(const AdamWShard& shard, std::span<const Range> decayed);

  cudaStream_t stream_ = nullptr;
  std::map<std::tuple<const float*, std::size_t, int64_t>, DecayedRanges> decayed_;  // per shard (address, size, offset)
  std::deque<DeviceBuffer> blocks_;
  double* scratch_ = nullptr;  // the reduction's partials, then its result
};

}  // namespace stagecraft::executor::cuda
