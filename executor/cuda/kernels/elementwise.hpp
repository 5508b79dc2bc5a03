// Element-wise device kernels behind the Backend's element moves (backend.hpp): dst += src and
// dst = value over n fp32 elements, enqueued on `stream`. Pointers are device addresses. fp32
// addition is one IEEE operation per element, so the result equals CpuBackend::add bit for bit.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda {

void add(float* dst, const float* src, int64_t n, cudaStream_t stream);
void fill(float* dst, float value, int64_t n, cudaStream_t stream);

}  // namespace stagecraft::executor::cuda
