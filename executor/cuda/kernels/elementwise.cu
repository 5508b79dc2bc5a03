#include "executor/cuda/kernels/elementwise.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "executor/cuda/kernels/launch.cuh"

namespace stagecraft::executor::cuda {

namespace {

__global__ void add_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    dst[i] = __fadd_rn(dst[i], src[i]);  // no contraction: the CPU's float addition
  }
}

__global__ void fill_kernel(float* __restrict__ dst, float value, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    dst[i] = value;
  }
}

template <Half16 F>
__device__ __forceinline__ uint16_t to_bits(float x) {
  if constexpr (F == Half16::kBf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

template <Half16 F>
__device__ __forceinline__ float from_bits(uint16_t b) {
  if constexpr (F == Half16::kBf16) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  } else {
    return __half2float(__ushort_as_half(b));
  }
}

template <Half16 F>
__global__ void round_kernel(float* __restrict__ x, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    x[i] = from_bits<F>(to_bits<F>(x[i]));
  }
}

template <Half16 F>
__global__ void round_columns_kernel(float* __restrict__ x, int64_t n, int64_t row_stride, int64_t col0, int64_t width) {
  STAGECRAFT_GRID_STRIDE(i, n * width) {
    float* p = x + (i / width) * row_stride + col0 + i % width;
    *p = from_bits<F>(to_bits<F>(*p));
  }
}

template <Half16 F>
__global__ void pack_kernel(const float* __restrict__ x, uint16_t* __restrict__ bits, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    bits[i] = to_bits<F>(x[i]);
  }
}

template <Half16 F>
__global__ void unpack_kernel(const uint16_t* __restrict__ bits, float* __restrict__ x, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    x[i] = from_bits<F>(bits[i]);
  }
}

}  // namespace

void add(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, src, n);
  launched();
}

void fill(float* dst, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, value, n);
  launched();
}

void round16(Half16 format, float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (format == Half16::kBf16) {
    round_kernel<Half16::kBf16><<<blocks_for(n), kThreads, 0, stream>>>(x, n);
  } else {
    round_kernel<Half16::kFp16><<<blocks_for(n), kThreads, 0, stream>>>(x, n);
  }
  launched();
}

void round16_columns(Half16 format, float* x, int64_t n, int64_t row_stride, int64_t col0, int64_t width,
                     cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  if (format == Half16::kBf16) {
    round_columns_kernel<Half16::kBf16><<<blocks_for(n * width), kThreads, 0, stream>>>(x, n, row_stride, col0, width);
  } else {
    round_columns_kernel<Half16::kFp16><<<blocks_for(n * width), kThreads, 0, stream>>>(x, n, row_stride, col0, width);
  }
  launched();
}

void pack16(Half16 format, const float* x, uint16_t* bits, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (format == Half16::kBf16) {
    pack_kernel<Half16::kBf16><<<blocks_for(n), kThreads, 0, stream>>>(x, bits, n);
  } else {
    pack_kernel<Half16::kFp16><<<blocks_for(n), kThreads, 0, stream>>>(x, bits, n);
  }
  launched();
}

void unpack16(Half16 format, const uint16_t* bits, float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (format == Half16::kBf16) {
    unpack_kernel<Half16::kBf16><<<blocks_for(n), kThreads, 0, stream>>>(bits, x, n);
  } else {
    unpack_kernel<Half16::kFp16><<<blocks_for(n), kThreads, 0, stream>>>(bits, x, n);
  }
  launched();
}

}  // namespace stagecraft::executor::cuda
