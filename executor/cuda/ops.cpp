#include "executor/cuda/ops.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/kernels/model.hpp"
#include "executor/cuda/kernels/optimizer.hpp"

namespace stagecraft::executor::cuda {

float* OpsContext::scratch(int64_t elems) {
  if (scratch_.size() < elems) scratch_ = DeviceBuffer(elems);
  return scratch_.data();
}

namespace ops {

namespace {

using kernels::Act;

// D = alpha op(A) op(B) + beta D (+ bias, one per row of D); returns whether the bias was added
// (false: the caller adds it).
bool gemm(OpsContext& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* d, int64_t ldd, float alpha, float beta, GemmCompute compute = GemmCompute::kFp32,
          const float* bias = nullptr) {
  if (m == 0 || n == 0) return true;
  if (k == 0) {  // D = beta D
    if (beta == 0.0f) {
      for (int64_t col = 0; col < n; ++col) cuda::fill(d + col * ldd, 0.0f, m, c.stream());
    }
    return false;
  }
  // the bias epilogue reads its vector in 16-byte loads: a bias elsewhere is the caller's pass
  if (bias != nullptr && reinterpret_cast<std::uintptr_t>(bias) % 16 != 0) bias = nullptr;
  GemmShape s{ta, tb, m, n, k, lda, ldb, ldd, GemmType::kFp32, compute, bias != nullptr};
  s.align = alignment_of({a, b, d});
  return c.gemm().run(s, a, b, d, alpha, beta, c.stream(), bias);
}

}  // namespace

void linear_forward(OpsContext& c, const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in,
                    int64_t out, GemmCompute compute) {
  // the bias in the GEMM's epilogue, else by a pass of its own
  const bool added = gemm(c, false, false, out, n, in, w, out, x, in, y, out, 1.0f, 0.0f, compute, b);
  if (b != nullptr && !added) kernels::add_bias_rows(y, b, n, out, c.stream());
}

void linear_backward_input(OpsContext& c, const float* dy, const float* w, float* dx, int64_t n, int64_t in, int64_t out,
                           bool accumulate, GemmCompute compute) {
  gemm(c, true, false, in, n, out, w, out, dy, out, dx, in, 1.0f, accumulate ? 1.0f : 0.0f, compute);
}

void linear_backward_weight(OpsContext& c, const float* x, const float* dy, float* dw, float* db, int64_t n, int64_t in,
                            int64_t out, GemmCompute compute) {
  gemm(c, false, true, out, in, n, dy, out, x, in, dw, out, 1.0f, 1.0f, compute);
  if (db != nullptr) kernels::column_sums(dy, nullptr, db, n, out, c.stream());
}

void norm_forward(OpsContext& c, bool layer_norm, double eps, const float* x, const float* w, const float* b, float* y,
                  float* xhat, float* rstd, int64_t n, int64_t cols) {
  kernels::norm_forward(layer_norm, static_cast<float>(eps), x, w, b, y, xhat, rstd, n, cols, c.stream());
}

void norm_backward_input(OpsContext& c, bool layer_norm, const float* dy, const float* w, const float* xhat,
                         const float* rstd, float* dx, int64_t n, int64_t cols, bool accumulate) {
  kernels::norm_backward_input(layer_norm, dy, w, xhat, rstd, dx, n, cols, accumulate, c.stream());
}

void norm_backward_weight(OpsContext& c, const float* dy, const float* xhat, float* dw, float* db, int64_t n, int64_t cols) {
  kernels::column_sums(dy, xhat, dw, n, cols, c.stream());
  if (db != nullptr) kernels::column_sums(dy, nullptr, db, n, cols, c.stream());
}

void gelu_forward(OpsContext& c, const float* u, float* out, int64_t count, bool exact) {
  kernels::act_forward(exact ? Act::kGeluExact : Act::kGeluTanh, u, out, count, c.stream());
}
void gelu_backward(OpsContext& c, const float* u, const float* dout, float* du, int64_t count, bool exact) {
  kernels::act_backward(exact ? Act::kGeluExact : Act::kGeluTanh, u, dout, du, count, c.stream());
}
void swiglu_forward(OpsContext& c, const float* gate, const float* up, float* out, int64_t count) {
  kernels::gated_forward(Act::kSilu, gate, up, out, count, c.stream());
}
void swiglu_backward(OpsContext& c, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                     int64_t count) {
  kernels::gated_backward(Act::kSilu, gate, up, dout, d_gate, d_up, count, c.stream());
}
void relu_forward(OpsContext& c, const float* u, float* out, int64_t count) {
  kernels::act_forward(Act::kRelu, u, out, count, c.stream());
}
void relu_backward(OpsContext& c, const float* u, const float* dout, float* du, int64_t count) {
  kernels::act_backward(Act::kRelu, u, dout, du, count, c.stream());
}
void geglu_forward(OpsContext& c, const float* gate, const float* up, float* out, int64_t count, bool exact) {
  kernels::gated_forward(exact ? Act::kGeluExact : Act::kGeluTanh, gate, up, out, count, c.stream());
}
void geglu_backward(OpsContext& c, const float* gate, const float* up, const float* dout, float* d_gate, float* d_up,
                    int64_t count, bool exact) {
  kernels::gated_backward(exact ? Act::kGeluExact : Act::kGeluTanh, gate, up, dout, d_gate, d_up, count, c.stream());
}

void rope(OpsContext& c, float* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
          bool inverse, double base) {
  kernels::rope(x, n, seq, row_stride, col0, heads, d, inverse, base, c.stream());
}

// Per (sequence b, query head h), with g = h / group its K/V head, rows of qkv at stride W:
//   S = q k^T / sqrt(D)  (T x T, row-major: column-major S^T = K . Q^T)
//   P = causal softmax(S) in place;  O = P v  (column-major O^T = V^T . P^T)
void attention_forward(OpsContext& c, const float* qkv, float* probs, float* out, const AttentionShape& a) {
  const int64_t T = a.seq, D = a.head_dim, C = a.hidden(), W = a.qkv_cols();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* rows = qkv + b * T * W;
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t g = h / a.group();
      const float* q = rows + h * D;
      const float* k = rows + C + g * D;
      const float* v = rows + C + a.kv_dim() + g * D;
      float* p = probs + (b * a.heads + h) * T * T;
      gemm(c, true, false, T, T, D, k, W, q, W, p, T, scale, 0.0f);
      kernels::causal_softmax_rows(p, T, c.stream());
      gemm(c, false, false, D, T, T, v, W, p, T, out + b * T * C + h * D, C, 1.0f, 0.0f);
    }
  }
}

// dP = dO v^T;  dv += P^T dO;  dS = P * (dP - rowsum(P * dP)) / sqrt(D);  dq = dS k;  dk += dS^T q.
void attention_backward(OpsContext& c, const float* qkv, const float* probs, const float* dout, float* dqkv,
                        const AttentionShape& a) {
  const int64_t T = a.seq, D = a.head_dim, C = a.hidden(), W = a.qkv_cols();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cuda::fill(dqkv, 0.0f, a.batch * T * W, c.stream());
  float* dp = c.scratch(T * T);
  for (int64_t b = 0; b < a.batch; ++b) {
    const float* rows = qkv + b * T * W;
    float* drows = dqkv + b * T * W;
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t g = h / a.group(), k0 = C + g * D, v0 = C + a.kv_dim() + g * D;
      const float* q = rows + h * D;
      const float* k = rows + k0;
      const float* v = rows + v0;
      const float* d_o = dout + b * T * C + h * D;
      const float* p = probs + (b * a.heads + h) * T * T;
      gemm(c, false, true, D, T, T, d_o, C, p, T, drows + v0, W, 1.0f, 1.0f);  // dv += P^T dO
      gemm(c, true, false, T, T, D, v, W, d_o, C, dp, T, 1.0f, 0.0f);          // dP = dO v^T
      kernels::softmax_backward_rows(p, dp, T, scale, c.stream());
      gemm(c, false, false, D, T, T, k, W, dp, T, drows + h * D, W, 1.0f, 0.0f);  // dq = dS k
      gemm(c, false, true, D, T, T, q, W, dp, T, drows + k0, W, 1.0f, 1.0f);      // dk += dS^T q
    }
  }
}

float softmax_cross_entropy(OpsContext& c, float* logits, const int32_t* targets, int64_t n, int64_t v) {
  if (n == 0) return 0.0f;
  // per-row losses (doubles) and their sum live in the scratch, two floats per double
  double* loss = reinterpret_cast<double*>(c.scratch(2 * (n + 1)));
  kernels::softmax_xent_rows(logits, targets, loss, n, v, c.stream());
  cuda::sum_doubles(loss, n, loss + n, c.stream());
  double total = 0;
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(&total, loss + n, sizeof total, cudaMemcpyDeviceToHost, c.stream()));
  STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(c.stream()));
  return static_cast<float>(total / static_cast<double>(n));
}

void softmax_cross_entropy_backward(OpsContext& c, const float* probs, const int32_t* targets, float scale,
                                    float* dlogits, int64_t n, int64_t v) {
  kernels::xent_backward(probs, targets, scale, dlogits, n, v, c.stream());
}

void embedding_forward(OpsContext& c, const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n,
                       int64_t h, int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset) {
  kernels::embedding_forward(tokens, wte, wpe, y, n, h, seq, vocab0, vocab, pos_offset, c.stream());
}

void embedding_backward_weight(OpsContext& c, const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n,
                               int64_t h, int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset) {
  kernels::embedding_backward(tokens, dy, dwte, dwpe, n, h, seq, vocab0, vocab, pos_offset, c.stream());
}

void add(OpsContext& c, float* y, const float* x, int64_t count) { cuda::add(y, x, count, c.stream()); }

}  // namespace ops
}  // namespace stagecraft::executor::cuda
