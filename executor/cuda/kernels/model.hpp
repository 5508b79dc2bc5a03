// Launchers of the model-math kernels (model.cu) behind cuda::ops (ops.hpp); raw device pointers.
// Fills and adds are elementwise.hpp's, the fixed-order double sum optimizer.hpp's.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda::kernels {

void add_bias_rows(float* y, const float* b, int64_t n, int64_t cols, cudaStream_t s);
// out[j] += sum over rows of a[r, j] (* b[r, j] when b is given), rows in order.
void column_sums(const float* a, const float* b, float* out, int64_t n, int64_t cols, cudaStream_t s);
void norm_forward(bool layer_norm, float eps, const float* x, const float* w, const float* b, float* y, float* xhat,
                  float* rstd, int64_t n, int64_t cols, cudaStream_t s);
void norm_backward_input(bool layer_norm, const float* dy, const float* w, const float* xhat, const float* rstd, float* dx,
                         int64_t n, int64_t cols, bool accumulate, cudaStream_t s);
enum class Act { kGeluTanh, kGeluExact, kRelu, kSilu };
void act_forward(Act a, const float* u, float* out, int64_t count, cudaStream_t s);
void act_backward(Act a, const float* u, const float* dout, float* du, int64_t count, cudaStream_t s);
// out = act(gate) * up;  d_gate = dout * up * act'(gate), d_up = dout * act(gate).
void gated_forward(Act a, const float* gate, const float* up, float* out, int64_t count, cudaStream_t s);
void gated_backward(Act a, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                    int64_t count, cudaStream_t s);
void rope(float* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
          double base, cudaStream_t s);
// Causal softmax of each row i of a T x T matrix (columns <= i), zeros above the diagonal.
void causal_softmax_rows(float* p, int64_t t, cudaStream_t s);
// dS = P * (dP - rowsum(P * dP)) * scale, in place in dp.
void softmax_backward_rows(const float* p, float* dp, int64_t t, float scale, cudaStream_t s);
// Rows of logits to probabilities; loss[r] = log(sum) - (z[target] - max), in double.
void softmax_xent_rows(float* logits, const int32_t* targets, double* loss, int64_t n, int64_t v, cudaStream_t s);
void xent_backward(const float* probs, const int32_t* targets, float scale, float* d, int64_t n, int64_t v, cudaStream_t s);
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n, int64_t h,
                       int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset, cudaStream_t s);
void embedding_backward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n, int64_t h,
                        int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset, cudaStream_t s);

}  // namespace stagecraft::executor::cuda::kernels
