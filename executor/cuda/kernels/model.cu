#include "executor/cuda/kernels/model.hpp"

#include <math_constants.h>

#include "executor/cuda/kernels/launch.cuh"

namespace stagecraft::executor::cuda::kernels {

namespace {



// Block-wide sum of one value per thread (kThreads threads), fixed tree order; every thread gets it.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) shared[threadIdx.x] += shared[threadIdx.x + w];
    __syncthreads();
  }
  const T out = shared[0];
  __syncthreads();
  return out;
}

__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + w]);
    __syncthreads();
  }
  const float out = shared[0];
  __syncthreads();
  return out;
}

__global__ void add_bias_rows_k(float* y, const float* b, int64_t n, int64_t cols) {
  STAGECRAFT_GRID_STRIDE(i, n * cols) { y[i] += b[i % cols]; }
}

__global__ void column_sums_k(const float* a, const float* b, float* out, int64_t n, int64_t cols) {
  STAGECRAFT_GRID_STRIDE(j, cols) {
    float acc = 0;
    for (int64_t r = 0; r < n; ++r) acc += b ? a[r * cols + j] * b[r * cols + j] : a[r * cols + j];
    out[j] += acc;
  }
}

// One block per row: mean (LayerNorm), then rstd = 1 / sqrt(mean((x - mean)^2) + eps).
__global__ void norm_forward_k(bool layer_norm, float eps, const float* x, const float* w, const float* b, float* y,
                               float* xhat, float* rstd, int64_t cols) {
  __shared__ float sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) s += xr[j];
  const float mean = layer_norm ? block_sum(s, sh) / static_cast<float>(cols) : 0.0f;
  float q = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const float h = xr[j] - mean;
    q += h * h;
  }
  const float rs = 1.0f / sqrtf(block_sum(q, sh) / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const float h = (xr[j] - mean) * rs;
    xhat[r * cols + j] = h;
    y[r * cols + j] = h * w[j] + (b ? b[j] : 0.0f);
  }
}

__global__ void norm_backward_input_k(bool layer_norm, const float* dy, const float* w, const float* xhat,
                                      const float* rstd, float* dx, int64_t cols, bool accumulate) {
  __shared__ float sh[kThreads];
  const int64_t r = blockIdx.x;
  float gs = 0, ghs = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const float g = dy[r * cols + j] * w[j];
    gs += g;
    ghs += g * xhat[r * cols + j];
  }
  const float g_mean = layer_norm ? block_sum(gs, sh) / static_cast<float>(cols) : 0.0f;
  const float gh_mean = block_sum(ghs, sh) / static_cast<float>(cols);
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const float g = dy[r * cols + j] * w[j];
    const float v = rstd[r] * (g - g_mean - xhat[r * cols + j] * gh_mean);
    dx[r * cols + j] = accumulate ? dx[r * cols + j] + v : v;
  }
}

__device__ float act_f(Act a, float x) {
  switch (a) {
    case Act::kGeluTanh: {
      const float k = 0.7978845608028654f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
    case Act::kGeluExact: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case Act::kRelu: return x > 0.0f ? x : 0.0f;
    case Act::kSilu: return x / (1.0f + expf(-x));
  }
  return 0.0f;
}

__device__ float act_grad(Act a, float x) {
  switch (a) {
    case Act::kGeluTanh: {
      const float k = 0.7978845608028654f;
      const float t = tanhf(k * (x + 0.044715f * x * x * x));
      const float dt = k * (1.0f + 3.0f * 0.044715f * x * x);
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt;
    }
    case Act::kGeluExact: {
      const float cdf = 0.5f * (1.0f + erff(x * 0.7071067811865476f));
      return cdf + x * 0.3989422804014327f * expf(-0.5f * x * x);
    }
    case Act::kRelu: return x > 0.0f ? 1.0f : 0.0f;
    case Act::kSilu: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f + x * (1.0f - s));
    }
  }
  return 0.0f;
}

__global__ void act_forward_k(Act a, const float* u, float* out, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) { out[i] = act_f(a, u[i]); }
}
__global__ void act_backward_k(Act a, const float* u, const float* dout, float* du, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) { du[i] = a == Act::kRelu ? (u[i] > 0.0f ? dout[i] : 0.0f) : dout[i] * act_grad(a, u[i]); }
}
__global__ void gated_forward_k(Act a, const float* gate, const float* up, float* out, int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) { out[i] = act_f(a, gate[i]) * up[i]; }
}
__global__ void gated_backward_k(Act a, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                                 int64_t n) {
  STAGECRAFT_GRID_STRIDE(i, n) {
    const float g = gate[i], d = dout[i];
    d_gate[i] = d * up[i] * act_grad(a, g);
    d_up[i] = d * act_f(a, g);
  }
}

// Pair (i, i + d/2) of each head at position t turns by t * base^(-2i/d) (angles in double, as the host).
__global__ void rope_k(float* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
                       bool inverse, double base) {
  const int64_t half = d / 2;
  STAGECRAFT_GRID_STRIDE(e, n * heads * half) {
    const int64_t i = e % half, h = (e / half) % heads, r = e / (half * heads);
    const double angle = static_cast<double>(r % seq) * pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const float c = static_cast<float>(cos(angle));
    const float s = static_cast<float>(inverse ? -sin(angle) : sin(angle));
    float* v = x + r * row_stride + col0 + h * d;
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// One block per row i of every T x T matrix (blockIdx.x = matrix * T + i).
__global__ void causal_softmax_k(float* p, int64_t t) {
  __shared__ float sh[kThreads];
  const int64_t row = blockIdx.x, i = row % t;
  float* pr = p + row * t;
  float m = -CUDART_INF_F;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) m = fmaxf(m, pr[j]);
  m = block_max(m, sh);
  float s = 0;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    const float e = expf(pr[j] - m);
    pr[j] = e;
    s += e;
  }
  s = block_sum(s, sh);
  for (int64_t j = threadIdx.x; j < t; j += kThreads) pr[j] = j <= i ? pr[j] / s : 0.0f;
}

__global__ void softmax_backward_k(const float* p, float* dp, int64_t t, float scale) {
  __shared__ float sh[kThreads];
  const int64_t row = blockIdx.x;
  const float* pr = p + row * t;
  float* dr = dp + row * t;
  float s = 0;
  for (int64_t j = threadIdx.x; j < t; j += kThreads) s += pr[j] * dr[j];
  s = block_sum(s, sh);
  for (int64_t j = threadIdx.x; j < t; j += kThreads) dr[j] = pr[j] * (dr[j] - s) * scale;
}

__global__ void softmax_xent_k(float* logits, const int32_t* targets, double* loss, int64_t v) {
  __shared__ float sh[kThreads];
  __shared__ double shd[kThreads];
  const int64_t r = blockIdx.x;
  float* z = logits + r * v;
  float m = -CUDART_INF_F;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) m = fmaxf(m, z[j]);
  m = block_max(m, sh);
  const float target_shifted = z[targets[r]] - m;
  __syncthreads();  // every thread read the target logit before it is overwritten
  double s = 0;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) {
    const float e = expf(z[j] - m);
    z[j] = e;
    s += e;
  }
  const double sum = block_sum(s, shd);
  const float fs = static_cast<float>(sum);
  for (int64_t j = threadIdx.x; j < v; j += kThreads) z[j] /= fs;
  if (threadIdx.x == 0) loss[r] = log(sum) - static_cast<double>(target_shifted);
}

__global__ void xent_backward_k(const float* probs, const int32_t* targets, float scale, float* d, int64_t n, int64_t v) {
  STAGECRAFT_GRID_STRIDE(i, n * v) {
    const int64_t r = i / v, j = i % v;
    d[i] = probs[i] * scale - (j == targets[r] ? scale : 0.0f);
  }
}

__global__ void embedding_forward_k(const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n,
                                    int64_t h, int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset) {
  STAGECRAFT_GRID_STRIDE(e, n * h) {
    const int64_t r = e / h, j = e % h;
    const int64_t row = tokens[r] - vocab0;
    float v = row >= 0 && row < vocab ? wte[row * h + j] : 0.0f;
    if (wpe) v += wpe[(r % seq + pos_offset) * h + j];
    y[e] = v;
  }
}

// One thread per column: it alone writes that column of both tables, visiting rows in order.
__global__ void embedding_backward_k(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n, int64_t h,
                                     int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset) {
  STAGECRAFT_GRID_STRIDE(j, h) {
    for (int64_t r = 0; r < n; ++r) {
      const float d = dy[r * h + j];
      const int64_t row = tokens[r] - vocab0;
      if (row >= 0 && row < vocab) dwte[row * h + j] += d;
      if (dwpe) dwpe[(r % seq + pos_offset) * h + j] += d;
    }
  }
}

}  // namespace

void add_bias_rows(float* y, const float* b, int64_t n, int64_t cols, cudaStream_t s) {
  add_bias_rows_k<<<blocks_for(n * cols), kThreads, 0, s>>>(y, b, n, cols);
  launched();
}
void column_sums(const float* a, const float* b, float* out, int64_t n, int64_t cols, cudaStream_t s) {
  column_sums_k<<<blocks_for(cols), kThreads, 0, s>>>(a, b, out, n, cols);
  launched();
}
void norm_forward(bool layer_norm, float eps, const float* x, const float* w, const float* b, float* y, float* xhat,
                  float* rstd, int64_t n, int64_t cols, cudaStream_t s) {
  if (n <= 0) return;
  norm_forward_k<<<static_cast<unsigned>(n), kThreads, 0, s>>>(layer_norm, eps, x, w, b, y, xhat, rstd, cols);
  launched();
}
void norm_backward_input(bool layer_norm, const float* dy, const float* w, const float* xhat, const float* rstd, float* dx,
                         int64_t n, int64_t cols, bool accumulate, cudaStream_t s) {
  if (n <= 0) return;
  norm_backward_input_k<<<static_cast<unsigned>(n), kThreads, 0, s>>>(layer_norm, dy, w, xhat, rstd, dx, cols, accumulate);
  launched();
}
void act_forward(Act a, const float* u, float* out, int64_t count, cudaStream_t s) {
  act_forward_k<<<blocks_for(count), kThreads, 0, s>>>(a, u, out, count);
  launched();
}
void act_backward(Act a, const float* u, const float* dout, float* du, int64_t count, cudaStream_t s) {
  act_backward_k<<<blocks_for(count), kThreads, 0, s>>>(a, u, dout, du, count);
  launched();
}
void gated_forward(Act a, const float* gate, const float* up, float* out, int64_t count, cudaStream_t s) {
  gated_forward_k<<<blocks_for(count), kThreads, 0, s>>>(a, gate, up, out, count);
  launched();
}
void gated_backward(Act a, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                    int64_t count, cudaStream_t s) {
  gated_backward_k<<<blocks_for(count), kThreads, 0, s>>>(a, gate, up, dout, d_gate, d_up, count);
  launched();
}
void rope(float* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
          double base, cudaStream_t s) {
  rope_k<<<blocks_for(n * heads * (d / 2)), kThreads, 0, s>>>(x, n, seq, row_stride, col0, heads, d, inverse, base);
  launched();
}
void causal_softmax_rows(float* p, int64_t t, cudaStream_t s) {
  // p holds one T x T matrix here; the caller loops over (batch, head)
  causal_softmax_k<<<static_cast<unsigned>(t), kThreads, 0, s>>>(p, t);
  launched();
}
void softmax_backward_rows(const float* p, float* dp, int64_t t, float scale, cudaStream_t s) {
  softmax_backward_k<<<static_cast<unsigned>(t), kThreads, 0, s>>>(p, dp, t, scale);
  launched();
}
void softmax_xent_rows(float* logits, const int32_t* targets, double* loss, int64_t n, int64_t v, cudaStream_t s) {
  if (n <= 0) return;
  softmax_xent_k<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, targets, loss, v);
  launched();
}
void xent_backward(const float* probs, const int32_t* targets, float scale, float* d, int64_t n, int64_t v, cudaStream_t s) {
  xent_backward_k<<<blocks_for(n * v), kThreads, 0, s>>>(probs, targets, scale, d, n, v);
  launched();
}
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n, int64_t h,
                       int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset, cudaStream_t s) {
  embedding_forward_k<<<blocks_for(n * h), kThreads, 0, s>>>(tokens, wte, wpe, y, n, h, seq, vocab0, vocab, pos_offset);
  launched();
}
void embedding_backward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n, int64_t h,
                        int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset, cudaStream_t s) {
  embedding_backward_k<<<blocks_for(h), kThreads, 0, s>>>(tokens, dy, dwte, dwpe, n, h, seq, vocab0, vocab, pos_offset);
  launched();
}

}  // namespace stagecraft::executor::cuda::kernels
