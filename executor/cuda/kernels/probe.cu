#include "executor/cuda/kernels/probe.hpp"

#include <cuda_bf16.h>

#include "executor/cuda/kernels/launch.cuh"

namespace stagecraft::executor::cuda {

namespace {


template <typename T>
__global__ void operands_kernel(T* a, T* b, int64_t n) {
  const int64_t total = n * n;
  STAGECRAFT_GRID_STRIDE(e, total) {
    const int64_t i = e % n, j = e / n;  // column-major: element (i, j) at i + j n
    a[e] = static_cast<T>(static_cast<float>((i + 2 * j) % 7) - 3.0f);
    b[e] = static_cast<T>(static_cast<float>((2 * i + j) % 5) - 2.0f);
  }
}

__global__ void triad_kernel(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c, float s,
                             int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    a[i] = b[i] + s * c[i];
  }
}

}  // namespace

void fill_probe_operands(void* a, void* b, int64_t n, bool bf16, cudaStream_t stream) {
  if (bf16) {
    operands_kernel<<<blocks_for(n * n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(a), static_cast<__nv_bfloat16*>(b), n);
  } else {
    operands_kernel<<<blocks_for(n * n), kThreads, 0, stream>>>(static_cast<float*>(a), static_cast<float*>(b), n);
  }
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

void triad(float* a, const float* b, const float* c, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  triad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, c, s, n);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stagecraft::executor::cuda
