// DeviceBuffer: fp32 elements in device memory (plain device memory from the caching pool below,
// never managed), zero-filled, back to the pool with the object; host copies in and out for tests,
// checkpoints and export.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "executor/pool.hpp"

namespace stagecraft::executor::cuda {

// The device's caching pool (executor/pool.hpp over cudaMalloc / cudaFree): every DeviceBuffer and
// DeviceVector takes its memory from here, so a step whose sizes the last one had calls neither
// (cudaFree synchronises the device). One per process: a rank drives one device.
BlockPool& device_pool();

// The stream device memory is ordered on: the compute stream of the process's CUDA backend (one
// rank drives one GPU), or the legacy default stream (null) when none is set. A buffer's zeroing,
// a vector's growth and host copies are enqueued on it, so a block the host released while
// kernels on it still read it (work is issued asynchronously, backend.hpp) is reused only after
// them; work on another stream (NCCL's) is ordered after everything enqueued on it so far by
// order_after_device_stream. With no stream set every call completes before it returns, as before.
cudaStream_t device_stream();
// The process's compute stream, shared by every live CUDA backend: the first acquire creates it
// (non-blocking) and sets it as the device stream, the last release waits for it, unsets and
// destroys it.
cudaStream_t acquire_device_stream();
void release_device_stream();
// `stream`'s next work waits for all work enqueued on device_stream() until now (an event).
void order_after_device_stream(cudaStream_t stream);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t elems);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<float> view() const { return {data_, static_cast<std::size_t>(size_)}; }

  // Synchronous host copies (the whole buffer; `values` must have size() elements).
  void upload(std::span<const float> values);
  std::vector<float> download() const;

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace stagecraft::executor::cuda
