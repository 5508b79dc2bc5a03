// HostOps: the CPU model math of ops.hpp as a kernel set's calls, vectors in host memory, and the
// rounding of a stored value to the Program's storage format (precision.hpp). HostKernels, what the
// units (units_impl.hpp) compose on the host, is StoredKernels<HostOps> (stored_kernels.hpp): the
// same calls with every store a GPU kernel makes rounded, at the points that header lists once for
// the host and a device (executor/cuda/device_kernels.hpp). Each call mirrors an ops:: function; the
// few element moves the composition needs (copy, add, one value in or out, a host-to-memory copy of
// token ids) are spelled out here.
//
// `format`: kFp32 (the oracle's default) rounds nothing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "executor/model/ops.hpp"
#include "executor/model/stored_kernels.hpp"
#include "executor/precision.hpp"

namespace stagecraft::executor {

struct HostOps {
  static constexpr bool kHost = true;
  Format format = Format::kFp32;
  template <typename S>
  void round(S* values, int64_t count) const {
    round_all(format, values, count);
  }
  static int64_t position(int64_t row, int64_t seq, const int64_t* pos) { return pos != nullptr ? pos[row % seq] : row % seq; }
  template <typename T>
  using Vec = std::vector<T>;

  template <typename S>
  void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) {
    ops::linear_forward(x, w, b, y, n, in, out);
  }
  template <typename S>
  void linear_backward_input(const S* dy, const S* w, S* dx, int64_t n, int64_t in, int64_t out, bool accumulate) {
    ops::linear_backward_input(dy, w, dx, n, in, out, accumulate);
  }
  template <typename S>
  void linear_backward_weight(const S* x, const S* dy, S* dw, S* db, int64_t n, int64_t in, int64_t out) {
    ops::linear_backward_weight(x, dy, dw, db, n, in, out);
  }
  template <typename S>
  void norm_forward(bool layer_norm, double eps, const S* x, const S* w, const S* b, S* y, S* xhat, S* rstd, int64_t n,
                    int64_t c) {
    ops::norm_forward(layer_norm, eps, x, w, b, y, xhat, rstd, n, c);
  }
  template <typename S>
  void norm_backward_input(bool layer_norm, const S* dy, const S* w, const S* xhat, const S* rstd, S* dx, int64_t n,
                           int64_t c, bool accumulate) {
    ops::norm_backward_input(layer_norm, dy, w, xhat, rstd, dx, n, c, accumulate);
  }
  template <typename S>
  void norm_backward_weight(const S* dy, const S* xhat, S* dw, S* db, int64_t n, int64_t c) {
    ops::norm_backward_weight(dy, xhat, dw, db, n, c);
  }
  template <typename S>
  void gelu_forward(const S* u, S* out, int64_t count, bool exact) {
    ops::gelu_forward(u, out, count, exact);
  }
  template <typename S>
  void gelu_backward(const S* u, const S* dout, S* du, int64_t count, bool exact) {
    ops::gelu_backward(u, dout, du, count, exact);
  }
  template <typename S>
  void swiglu_forward(const S* gate, const S* up, S* out, int64_t count) {
    ops::swiglu_forward(gate, up, out, count);
  }
  template <typename S>
  void swiglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count) {
    ops::swiglu_backward(gate, up, dout, d_gate, d_up, count);
  }
  template <typename S>
  void relu_forward(const S* u, S* out, int64_t count) {
    ops::relu_forward(u, out, count);
  }
  template <typename S>
  void relu_backward(const S* u, const S* dout, S* du, int64_t count) {
    ops::relu_backward(u, dout, du, count);
  }
  template <typename S>
  void geglu_forward(const S* gate, const S* up, S* out, int64_t count, bool exact) {
    ops::geglu_forward(gate, up, out, count, exact);
  }
  template <typename S>
  void geglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count, bool exact) {
    ops::geglu_backward(gate, up, dout, d_gate, d_up, count, exact);
  }
  template <typename S>
  void rope(S* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
            double base) {
    ops::rope(x, n, seq, row_stride, col0, heads, d, inverse, base);
  }
  template <typename S>
  void rope_at(S* x, int64_t n, std::span<const int64_t> pos, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
               bool inverse, double base) {
    ops::rope_at(x, n, pos, row_stride, col0, heads, d, inverse, base);
  }
  template <typename S>
  void attention_forward(const S* qkv, S* probs, S* out, const ops::AttentionShape& a) {
    ops::attention_forward(qkv, probs, out, a);
  }
  template <typename S>
  void attention_backward(const S* qkv, const S* probs, const S* dout, S* dqkv, const ops::AttentionShape& a) {
    ops::attention_backward(qkv, probs, dout, dqkv, a);
  }
  template <typename S>
  S softmax_cross_entropy(S* logits, const int32_t* targets, int64_t n, int64_t v) {
    return ops::softmax_cross_entropy(logits, targets, n, v);
  }
  template <typename S>
  void softmax_cross_entropy_backward(const S* probs, const int32_t* targets, S scale, S* dlogits, int64_t n, int64_t v) {
    ops::softmax_cross_entropy_backward(probs, targets, scale, dlogits, n, v);
  }
  // y[r] = wte[tokens[r] - vocab0] (0 off [vocab0, vocab0 + vocab)) + wpe[p(r) + pos_offset] (when given),
  // p(r) = r mod seq, or pos[r mod seq] when given (context parallelism: the rank's positions).
  template <typename S>
  void embedding_forward(const int32_t* tokens, const S* wte, const S* wpe, S* y, int64_t n, int64_t h, int64_t seq,
                         int64_t vocab0, int64_t vocab, int64_t pos_offset, const int64_t* pos = nullptr) {
    for (int64_t r = 0; r < n; ++r) {
      ops::RowMap<S> yr(y + r * h, h);
      const int64_t row = tokens[r] - vocab0;
      if (row >= 0 && row < vocab) {
        yr = ops::ConstRowMap<S>(wte + row * h, h);
      } else {
        yr.setZero();
      }
      if (wpe != nullptr) yr += ops::ConstRowMap<S>(wpe + (position(r, seq, pos) + pos_offset) * h, h);
    }
  }
  // dwte[tokens[r] - vocab0] += dy[r]; dwpe[p(r) + pos_offset] += dy[r] (when given), rows in order.
  template <typename S>
  void embedding_backward_weight(const int32_t* tokens, const S* dy, S* dwte, S* dwpe, int64_t n, int64_t h, int64_t seq,
                                 int64_t vocab0, int64_t vocab, int64_t pos_offset, const int64_t* pos = nullptr) {
    for (int64_t r = 0; r < n; ++r) {
      ops::ConstRowMap<S> dr(dy + r * h, h);
      const int64_t row = tokens[r] - vocab0;
      if (row >= 0 && row < vocab) ops::RowMap<S>(dwte + row * h, h) += dr;
      if (dwpe != nullptr) ops::RowMap<S>(dwpe + (position(r, seq, pos) + pos_offset) * h, h) += dr;
    }
  }
  template <typename S>
  void add(S* y, const S* x, int64_t count) {
    ops::MatMap<S>(y, count, 1) += ops::ConstMatMap<S>(x, count, 1);
  }
  template <typename S>
  void copy(S* dst, const S* src, int64_t count) {
    std::copy(src, src + count, dst);
  }
  template <typename T>
  void assign(Vec<T>& v, const T* src, int64_t count) {
    v.assign(src, src + count);
  }
  template <typename T>
  void upload(Vec<T>& v, const T* host, int64_t count) {
    v.assign(host, host + count);
  }
  // Columns [col0, col0 + width) of n rows `row_stride` apart.
  template <typename S>
  void round_columns(S* x, int64_t n, int64_t row_stride, int64_t col0, int64_t width) const {
    for (int64_t r = 0; r < n; ++r) round(x + r * row_stride + col0, width);
  }
  template <typename S>
  S load(const S* p) {
    return *p;
  }
  template <typename S>
  void store(S* p, S value) {
    *p = value;
  }
};

// The host oracle's kernel set: the host math with its stores rounded.
using HostKernels = StoredKernels<HostOps>;

}  // namespace stagecraft::executor
