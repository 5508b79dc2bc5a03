// DeviceBuffer: fp32 elements in device memory (cudaMalloc, plain device memory, never managed),
// zero-filled, freed with the object; host copies in and out for tests, checkpoints and export.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace stagecraft::executor::cuda {

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
