// The CPU model math's kernels (executor/model/ops.hpp) on a CUDA device, fp32, the same names,
// shapes and row-major layouts, device pointers: what the device units compose as the CPU units
// compose ops::. GEMMs go through cuBLASLt (gemm.hpp) in the column-major forms below; the rest
// are kernels in kernels/model.cu. Reductions over rows and columns run in a fixed order, so
// results repeat run to run; they are not the host's summation order, and the tests hold them to
// the double-precision host math within fp32 tolerances.
//
// Row-major X[N, in], W[in, out] as cuBLAS sees them (column-major): X is in x N (ld in), W is
// out x in (ld out), Y[N, out] is out x N (ld out):
//   y = x W        D(out x N) = W(out x in) . X(in x N)
//   dx = dy W^T    D(in x N)  = W^T . dY(out x N)          (transposed A)
//   dW += x^T dy   D(out x in) += dY(out x N) . X^T        (transposed B, beta 1)
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "executor/cuda/buffers.hpp"
#include "executor/cuda/gemm.hpp"

namespace stagecraft::executor::cuda {

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t hidden() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t qkv_cols() const { return hidden() + 2 * kv_dim(); }
  int64_t group() const { return heads / kv_heads; }
};

// What the ops share: the stream they run on, the GEMM plans, scratch memory.
class OpsContext {
 public:
  explicit OpsContext(cudaStream_t stream = nullptr) : stream_(stream) {}
  cudaStream_t stream() const { return stream_; }
  LtGemm& gemm() { return gemm_; }
  // At least `elems` floats of scratch (grown, never shrunk; contents undefined).
  float* scratch(int64_t elems);

 private:
  cudaStream_t stream_ = nullptr;
  LtGemm gemm_;
  DeviceBuffer scratch_;
};

namespace ops {

// `compute`: the GEMM's (gemm.hpp); kBf16Inputs / kFp16Inputs where x, w and dy hold 16-bit values.
void linear_forward(OpsContext& c, const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in,
                    int64_t out, GemmCompute compute = GemmCompute::kFp32);
void linear_backward_input(OpsContext& c, const float* dy, const float* w, float* dx, int64_t n, int64_t in, int64_t out,
                           bool accumulate, GemmCompute compute = GemmCompute::kFp32);
void linear_backward_weight(OpsContext& c, const float* x, const float* dy, float* dw, float* db, int64_t n, int64_t in,
                            int64_t out, GemmCompute compute = GemmCompute::kFp32);

void norm_forward(OpsContext& c, bool layer_norm, double eps, const float* x, const float* w, const float* b, float* y,
                  float* xhat, float* rstd, int64_t n, int64_t cols);
void norm_backward_input(OpsContext& c, bool layer_norm, const float* dy, const float* w, const float* xhat,
                         const float* rstd, float* dx, int64_t n, int64_t cols, bool accumulate);
void norm_backward_weight(OpsContext& c, const float* dy, const float* xhat, float* dw, float* db, int64_t n, int64_t cols);

void gelu_forward(OpsContext& c, const float* u, float* out, int64_t count, bool exact);
void gelu_backward(OpsContext& c, const float* u, const float* dout, float* du, int64_t count, bool exact);
void swiglu_forward(OpsContext& c, const float* gate, const float* up, float* out, int64_t count);
void swiglu_backward(OpsContext& c, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                     int64_t count);
void relu_forward(OpsContext& c, const float* u, float* out, int64_t count);
void relu_backward(OpsContext& c, const float* u, const float* dout, float* du, int64_t count);
void geglu_forward(OpsContext& c, const float* gate, const float* up, float* out, int64_t count, bool exact);
void geglu_backward(OpsContext& c, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                    int64_t count, bool exact);

void rope(OpsContext& c, float* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
          bool inverse, double base);

// probs [B, H, T, T] (zeros above the diagonal), out [N, C]; dqkv is overwritten.
void attention_forward(OpsContext& c, const float* qkv, float* probs, float* out, const AttentionShape& a);
void attention_backward(OpsContext& c, const float* qkv, const float* probs, const float* dout, float* dqkv,
                        const AttentionShape& a);

// logits [N, V] become probabilities; returns the mean over rows of -log p[target] (targets are
// device int32 ids). Synchronises the stream to return it.
float softmax_cross_entropy(OpsContext& c, float* logits, const int32_t* targets, int64_t n, int64_t v);
void softmax_cross_entropy_backward(OpsContext& c, const float* probs, const int32_t* targets, float scale,
                                    float* dlogits, int64_t n, int64_t v);

// y[r] = wte[tokens[r] - vocab0] (0 outside [vocab0, vocab0 + vocab)) + wpe[r mod T + pos_offset]
// when wpe is given; and the table gradients, each column in row order.
void embedding_forward(OpsContext& c, const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n,
                       int64_t h, int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset);
void embedding_backward_weight(OpsContext& c, const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n,
                               int64_t h, int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset);

// y += x over count elements (the residual).
void add(OpsContext& c, float* y, const float* x, int64_t count);

}  // namespace ops
}  // namespace stagecraft::executor::cuda
