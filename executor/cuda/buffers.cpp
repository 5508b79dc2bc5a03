#include "executor/cuda/buffers.hpp"

#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

BlockPool& device_pool() {
  static BlockPool pool({[](std::size_t bytes) {
                           void* p = nullptr;
                           STAGECRAFT_CUDA_CHECK(cudaMalloc(&p, bytes));
                           return p;
                         },
                         [](void* p) { cudaFree(p); }});  // a failed free is reported by the next call
  return pool;
}

DeviceBuffer::DeviceBuffer(int64_t elems) : size_(elems) {
  if (elems < 0) throw ExecutorError("DeviceBuffer: " + std::to_string(elems) + " elements");
  if (elems == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(elems) * sizeof(float);
  data_ = static_cast<float*>(device_pool().allocate(bytes));
  STAGECRAFT_CUDA_CHECK(cudaMemset(data_, 0, bytes));
  // done before work on any stream (non-blocking ones included) may use the buffer
  STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

DeviceBuffer::~DeviceBuffer() { device_pool().release(data_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    device_pool().release(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != size_) {
    throw ExecutorError("DeviceBuffer::upload: " + std::to_string(values.size()) + " values into " + std::to_string(size_));
  }
  if (size_ > 0) {
    STAGECRAFT_CUDA_CHECK(cudaMemcpy(data_, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
}

std::vector<float> DeviceBuffer::download() const {
  std::vector<float> out(static_cast<std::size_t>(size_));
  if (size_ > 0) STAGECRAFT_CUDA_CHECK(cudaMemcpy(out.data(), data_, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace stagecraft::executor::cuda
