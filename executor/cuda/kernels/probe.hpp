// Device side of `stagecraft probe --backend cuda` (cli/probe_compute_cuda.cpp): the GEMM operands
// written on the device from traces::probe_gemm_a/b's formulas (column-major, small integers,
// exact in bf16), and the memory-bound triad a = b + s * c.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda {

// A(i, j) = (i + 2j) mod 7 - 3 and B(i, j) = (2i + j) mod 5 - 2, n x n column-major; bf16 when
// `bf16`, else fp32.
void fill_probe_operands(void* a, void* b, int64_t n, bool bf16, cudaStream_t stream);
void triad(float* a, const float* b, const float* c, float s, int64_t n, cudaStream_t stream);

}  // namespace stagecraft::executor::cuda
