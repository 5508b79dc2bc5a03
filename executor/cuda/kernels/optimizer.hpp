// Device kernels behind StateMemory (zero/state_memory.hpp) on a GPU: AdamW on one shard in one
// kernel, decay included, bit for bit the host's adamw_step (model/adamw.hpp: the same float
// operations in the same order, each rounded on its own: no contraction into FMAs), and the sum of
// squares in double (fixed-order two-pass reduction: the same result on every run).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda {

struct AdamWScalars {
  float b1, b2, c1, c2, lr, eps, grad_scale;  // c1 = 1 / (1 - b1^t), c2 = 1 / (1 - b2^t), as the host computes them
};

// One kernel over the shard: the decoupled weight decay (p *= decay) of the positions in the
// `decayed_count` sorted, disjoint [begin, end) pairs of `decayed` (device memory, shard-relative),
// then the update, each element's operations in the host's order.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWScalars& s,
                  const int64_t* decayed, int64_t decayed_count, float decay, cudaStream_t stream);
// Sum of squares of n floats in double, written to *out (device memory), with `partials` device
// scratch of kSumSqBlocks doubles.
inline constexpr int kSumSqBlocks = 264;
void sum_sq(const float* values, int64_t n, double* partials, double* out, cudaStream_t stream);
// *out = the sum of n doubles (device memory), one block in a fixed order.
void sum_doubles(const double* values, int64_t n, double* out, cudaStream_t stream);

}  // namespace stagecraft::executor::cuda
