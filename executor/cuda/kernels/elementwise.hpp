// Element-wise device kernels behind the Backend's element moves (backend.hpp) and the 16-bit
// formats (precision.hpp), enqueued on `stream`; pointers are device addresses.
//   add, fill     dst += src, dst = value over n fp32 elements. fp32 addition is one IEEE operation
//                 per element, so the result equals CpuBackend::add bit for bit.
//   round16       x = round_to(format, x) in place: round-to-nearest-even to bf16 or fp16 and back to
//                 fp32 (__float2bfloat16_rn / __float2half_rn; fp16 past 65504 is inf), bit for bit
//                 Eigen::bfloat16 / Eigen::half, the host oracle's rounding, for every value but NaN,
//                 which stays a NaN (CUDA writes the canonical 0x7FFF, Eigen a quiet NaN of the
//                 input's sign: the payloads differ). round16_columns
//                 does columns [col0, col0 + width) of n rows `row_stride` apart.
//   pack16        bits[i] = the 16-bit pattern of x[i] rounded (precision.hpp pack16: a wire's
//   unpack16      encoding); x[i] = the value of bits[i] (exact).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda {

enum class Half16 : uint8_t { kBf16, kFp16 };

void add(float* dst, const float* src, int64_t n, cudaStream_t stream);
void fill(float* dst, float value, int64_t n, cudaStream_t stream);
void round16(Half16 format, float* x, int64_t n, cudaStream_t stream);
void round16_columns(Half16 format, float* x, int64_t n, int64_t row_stride, int64_t col0, int64_t width,
                     cudaStream_t stream);
void pack16(Half16 format, const float* x, uint16_t* bits, int64_t n, cudaStream_t stream);
void unpack16(Half16 format, const uint16_t* bits, float* x, int64_t n, cudaStream_t stream);

}  // namespace stagecraft::executor::cuda
