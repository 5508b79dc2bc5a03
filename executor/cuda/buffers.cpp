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

namespace {
cudaStream_t g_stream = nullptr;
int g_stream_users = 0;
cudaStream_t g_owned = nullptr;
}  // namespace

cudaStream_t device_stream() { return g_stream; }

cudaStream_t acquire_device_stream() {
  if (g_stream_users++ == 0) {
    STAGECRAFT_CUDA_CHECK(cudaStreamCreateWithFlags(&g_owned, cudaStreamNonBlocking));
    g_stream = g_owned;
  }
  return g_owned;
}

void release_device_stream() {
  if (g_stream_users <= 0 || --g_stream_users > 0) return;
  cudaStreamSynchronize(g_owned);
  if (g_stream == g_owned) g_stream = nullptr;
  cudaStreamDestroy(g_owned);
  g_owned = nullptr;
}

void order_after_device_stream(cudaStream_t stream) {
  if (stream == g_stream) return;
  // with no stream set, kernels launched on the legacy stream (tests' OpsContext) are what to wait
  // for: non-blocking streams do not wait for it by themselves
  static cudaEvent_t mark = [] {
    cudaEvent_t e = nullptr;
    STAGECRAFT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }();
  STAGECRAFT_CUDA_CHECK(cudaEventRecord(mark, g_stream));
  STAGECRAFT_CUDA_CHECK(cudaStreamWaitEvent(stream, mark, 0));
}

DeviceBuffer::DeviceBuffer(int64_t elems) : size_(elems) {
  if (elems < 0) throw ExecutorError("DeviceBuffer: " + std::to_string(elems) + " elements");
  if (elems == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(elems) * sizeof(float);
  data_ = static_cast<float*>(device_pool().allocate(bytes));
  STAGECRAFT_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes, g_stream));
  // on the legacy stream: done before work on any stream (non-blocking ones included) may use it
  if (g_stream == nullptr) STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
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
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(data_, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(g_stream));  // `values` may go when this returns
  }
}

std::vector<float> DeviceBuffer::download() const {
  std::vector<float> out(static_cast<std::size_t>(size_));
  if (size_ > 0) {
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(out.data(), data_, out.size() * sizeof(float), cudaMemcpyDeviceToHost, g_stream));
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(g_stream));
  }
  return out;
}

}  // namespace stagecraft::executor::cuda
