// StoredKernels<Ops>: a kernel set whose stores are rounded to the Program's storage format
// (precision.hpp), the one list of the points where a GPU kernel writes a 16-bit value. Ops is the
// math in fp32 over its memory (HostOps, host_kernels.hpp; cuda::DeviceOps, executor/cuda/
// device_kernels.hpp) with `format` and round(values, count) / round_columns(...) over that memory;
// HostKernels and cuda::DeviceKernels are this template over them, so a bf16 CPU run and a bf16 GPU
// run round at the same places.
//
// Rounded once, after the fp32 computation (a kernel's epilogue writing 16 bits):
//   GEMM outputs (bias included), every input gradient (β = 1 accumulation included), norm outputs
//   and d(norm input), activation functions and their input gradients, RoPE's rotated columns, the
//   attention output and d(q|k|v), the classifier's d(logits), the embedding's lookup, the residual sum.
// Left in fp32 (what fused kernels keep in registers or save in fp32): weight and bias gradients
// (accumulated over the step), a norm's x̂ and rstd, the attention probabilities, the classifier's
// softmax and loss.
#pragma once

#include <cstdint>
#include <span>

namespace stagecraft::executor {

template <class Ops>
class StoredKernels : public Ops {
 public:
  using Ops::Ops;

  template <typename S>
  void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) {
    Ops::linear_forward(x, w, b, y, n, in, out);
    this->round(y, n * out);
  }
  template <typename S>
  void linear_backward_input(const S* dy, const S* w, S* dx, int64_t n, int64_t in, int64_t out, bool accumulate) {
    Ops::linear_backward_input(dy, w, dx, n, in, out, accumulate);
    this->round(dx, n * in);
  }
  template <typename S>
  void norm_forward(bool layer_norm, double eps, const S* x, const S* w, const S* b, S* y, S* xhat, S* rstd, int64_t n,
                    int64_t c) {
    Ops::norm_forward(layer_norm, eps, x, w, b, y, xhat, rstd, n, c);
    this->round(y, n * c);
  }
  template <typename S>
  void norm_backward_input(bool layer_norm, const S* dy, const S* w, const S* xhat, const S* rstd, S* dx, int64_t n,
                           int64_t c, bool accumulate) {
    Ops::norm_backward_input(layer_norm, dy, w, xhat, rstd, dx, n, c, accumulate);
    this->round(dx, n * c);
  }
  template <typename S>
  void gelu_forward(const S* u, S* out, int64_t count, bool exact) {
    Ops::gelu_forward(u, out, count, exact);
    this->round(out, count);
  }
  template <typename S>
  void gelu_backward(const S* u, const S* dout, S* du, int64_t count, bool exact) {
    Ops::gelu_backward(u, dout, du, count, exact);
    this->round(du, count);
  }
  template <typename S>
  void swiglu_forward(const S* gate, const S* up, S* out, int64_t count) {
    Ops::swiglu_forward(gate, up, out, count);
    this->round(out, count);
  }
  template <typename S>
  void swiglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count) {
    Ops::swiglu_backward(gate, up, dout, d_gate, d_up, count);
    this->round(d_gate, count);
    this->round(d_up, count);
  }
  template <typename S>
  void relu_forward(const S* u, S* out, int64_t count) {
    Ops::relu_forward(u, out, count);
    this->round(out, count);
  }
  template <typename S>
  void relu_backward(const S* u, const S* dout, S* du, int64_t count) {
    Ops::relu_backward(u, dout, du, count);
    this->round(du, count);
  }
  template <typename S>
  void geglu_forward(const S* gate, const S* up, S* out, int64_t count, bool exact) {
    Ops::geglu_forward(gate, up, out, count, exact);
    this->round(out, count);
  }
  template <typename S>
  void geglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count, bool exact) {
    Ops::geglu_backward(gate, up, dout, d_gate, d_up, count, exact);
    this->round(d_gate, count);
    this->round(d_up, count);
  }
  template <typename S>
  void rope(S* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
            double base) {
    Ops::rope(x, n, seq, row_stride, col0, heads, d, inverse, base);
    this->round_columns(x, n, row_stride, col0, heads * d);
  }
  template <typename S>
  void rope_at(S* x, int64_t n, std::span<const int64_t> pos, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
               bool inverse, double base) {
    Ops::rope_at(x, n, pos, row_stride, col0, heads, d, inverse, base);
    this->round_columns(x, n, row_stride, col0, heads * d);
  }
  template <typename S, typename Shape>
  void attention_forward(const S* qkv, S* probs, S* out, const Shape& a) {
    Ops::attention_forward(qkv, probs, out, a);
    this->round(out, a.batch * a.seq * a.hidden());
  }
  template <typename S, typename Shape>
  void attention_backward(const S* qkv, const S* probs, const S* dout, S* dqkv, const Shape& a) {
    Ops::attention_backward(qkv, probs, dout, dqkv, a);
    this->round(dqkv, a.batch * a.seq * a.qkv_cols());
  }
  template <typename S>
  void softmax_cross_entropy_backward(const S* probs, const int32_t* targets, S scale, S* dlogits, int64_t n, int64_t v) {
    Ops::softmax_cross_entropy_backward(probs, targets, scale, dlogits, n, v);
    this->round(dlogits, n * v);
  }
  template <typename S>
  void embedding_forward(const int32_t* tokens, const S* wte, const S* wpe, S* y, int64_t n, int64_t h, int64_t seq,
                         int64_t vocab0, int64_t vocab, int64_t pos_offset, const int64_t* pos = nullptr) {
    Ops::embedding_forward(tokens, wte, wpe, y, n, h, seq, vocab0, vocab, pos_offset, pos);
    this->round(y, n * h);
  }
  template <typename S>
  void add(S* y, const S* x, int64_t count) {
    Ops::add(y, x, count);
    this->round(y, count);
  }
};

}  // namespace stagecraft::executor
