// DeviceBuffer: fp32 elements in device memory (plain device memory from the caching pool below,
// never managed), zero-filled, back to the pool with the object; host copies in and out for tests,
// checkpoints and export.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "executor/pool.hpp"

namespace stagecraft::executor::cuda {

// The device's caching pool (executor/pool.hpp over cudaMalloc / cudaFree): every DeviceBuffer and
// DeviceVector takes its memory from here, so a step whose sizes the last one had calls neither
// (cudaFree synchronises the device). One per process: a rank drives one device.
BlockPool& device_pool();

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
