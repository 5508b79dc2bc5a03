#include "executor/cuda/kernels/optimizer.hpp"

#include "executor/cuda/kernels/launch.cuh"

namespace stagecraft::executor::cuda {

namespace {


// The host's expression tree, operation by operation (C++ evaluates a * b * c as (a * b) * c):
//   g = grad * scale;  m = b1 * m + (1 - b1) * g;  v = b2 * v + ((1 - b2) * g) * g;
//   p = p - (lr * (m * c1)) / (sqrt(v * c2) + eps)
// Whether i lies in one of the `count` sorted, disjoint [begin, end) pairs of `ranges`.
__device__ bool in_ranges(const int64_t* __restrict__ ranges, int64_t count, int64_t i) {
  int64_t lo = 0, hi = count;  // the first range whose begin is past i
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (ranges[2 * mid] <= i) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo > 0 && i < ranges[2 * (lo - 1) + 1];
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars s, const int64_t* __restrict__ decayed,
                             int64_t decayed_count, float decay) {
  const float one_b1 = __fsub_rn(1.0f, s.b1), one_b2 = __fsub_rn(1.0f, s.b2);
  STAGECRAFT_GRID_STRIDE(i, n) {
    // the decoupled decay first, as the host decays the range before the update
    const float pi = decayed_count > 0 && in_ranges(decayed, decayed_count, i) ? __fmul_rn(p[i], decay) : p[i];
    const float g = __fmul_rn(grad[i], s.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(one_b1, g));
    const float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float step = __fdiv_rn(__fmul_rn(s.lr, __fmul_rn(mi, s.c1)), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, s.c2)), s.eps));
    p[i] = __fsub_rn(pi, step);
  }
}

// Pass 1: block b sums squares of elements b, b + B, ... per thread, then a fixed tree in shared
// memory; pass 2: one block sums the B partials the same way.
__global__ void sum_sq_partial(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
  __shared__ double acc[kThreads];
  double t = 0;
  STAGECRAFT_GRID_STRIDE(i, n) {
    const double d = x[i];
    t = __dadd_rn(t, __dmul_rn(d, d));
  }
  acc[threadIdx.x] = t;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) acc[threadIdx.x] = __dadd_rn(acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = acc[0];
}

__global__ void sum_doubles_kernel(const double* __restrict__ partials, int64_t count, double* __restrict__ out) {
  __shared__ double acc[kThreads];
  double t = 0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) t = __dadd_rn(t, partials[i]);
  acc[threadIdx.x] = t;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) acc[threadIdx.x] = __dadd_rn(acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = acc[0];
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWScalars& s,
                  const int64_t* decayed, int64_t decayed_count, float decay, cudaStream_t stream) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grads, m, v, n, s, decayed, decayed_count, decay);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

void sum_sq(const float* values, int64_t n, double* partials, double* out, cudaStream_t stream) {
  sum_sq_partial<<<kSumSqBlocks, kThreads, 0, stream>>>(values, n, partials);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
  sum_doubles(partials, kSumSqBlocks, out, stream);
}

void sum_doubles(const double* values, int64_t n, double* out, cudaStream_t stream) {
  sum_doubles_kernel<<<1, kThreads, 0, stream>>>(values, n, out);
  STAGECRAFT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stagecraft::executor::cuda
