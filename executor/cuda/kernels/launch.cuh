// What every kernel file of executor/cuda shares: the block size, the grid of a grid-stride loop,
// the loop itself, and the launch check.
#pragma once

#include <cstdint>

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

inline constexpr int kThreads = 256;

// Enough blocks to fill the device, each thread looping over several elements when n is large.
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

inline void launched() { STAGECRAFT_CUDA_CHECK(cudaGetLastError()); }

}  // namespace stagecraft::executor::cuda

// for (i over [0, n)) spread over the grid's threads
#define STAGECRAFT_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
