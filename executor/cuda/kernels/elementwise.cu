#include "executor/cuda/kernels/elementwise.hpp"

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

namespace {

constexpr int kThreads = 256;

// A grid-stride loop: enough blocks to fill the device, each thread several elements.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

__global__ void add_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __fadd_rn(dst[i], src[i]);  // no contraction: the CPU's float addition
  }
}

__global__ void fill_kernel(float* __restrict__ dst, float value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

}  // namespace

void add(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, src, n);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

void fill(float* dst, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, value, n);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stagecraft::executor::cuda
