// Kernels of the CPU model math, forward and backward: linear (Eigen GEMMs on row-major maps),
// LayerNorm / RMSNorm, GELU (tanh) / SiLU, RoPE, causal grouped-query attention, softmax
// cross-entropy. Internal to executor/model (the units in layers.hpp compose them); raw pointers
// with explicit shapes, templated on the scalar so double can check float. Not a tensor library.
//
// Shape legend: N = B*T token rows (B sequences of T tokens), C hidden, H heads, G kv heads,
// D head dim (C = H*D), KV = G*D, F ffn hidden, V vocab. Row-major everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "executor/model/gemm_profile.hpp"

namespace stagecraft::executor::ops {

template <typename S>
using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using MatMap = Eigen::Map<Matrix<S>>;
template <typename S>
using ConstMatMap = Eigen::Map<const Matrix<S>>;
template <typename S>
using StridedMap = Eigen::Map<Matrix<S>, 0, Eigen::OuterStride<>>;
template <typename S>
using ConstStridedMap = Eigen::Map<const Matrix<S>, 0, Eigen::OuterStride<>>;
template <typename S>
using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <typename S>
using RowMap = Eigen::Map<RowVec<S>>;
template <typename S>
using ConstRowMap = Eigen::Map<const RowVec<S>>;

// The norms' epsilon and RoPE's base are the model's (spec::Model::norm_eps, rope_theta: GPT-2's
// LayerNorm 1e-5, LLaMA's RMSNorm 1e-5 or 1e-6; RoFormer's base 10000, Llama-3's 500000).

// ---- linear: y [N, out] = x [N, in] . w [in, out] (+ b [out]) ----------------------------------

template <typename S>
void linear_forward(const S* x, const S* w, const S* b, S* y, int64_t n, int64_t in, int64_t out) {
  MatMap<S> ym(y, n, out);
  {
    const GemmTimer timer(GemmForm::kNN, n, in, out, false);
    ym.noalias() = ConstMatMap<S>(x, n, in) * ConstMatMap<S>(w, in, out);
  }
  if (b != nullptr) ym.rowwise() += ConstRowMap<S>(b, out);
}

// dx [N, in] = dy [N, out] . w^T, or += when `accumulate`.
template <typename S>
void linear_backward_input(const S* dy, const S* w, S* dx, int64_t n, int64_t in, int64_t out, bool accumulate) {
  MatMap<S> dxm(dx, n, in);
  const GemmTimer timer(GemmForm::kNT, n, out, in, accumulate);
  if (accumulate) {
    dxm.noalias() += ConstMatMap<S>(dy, n, out) * ConstMatMap<S>(w, in, out).transpose();
  } else {
    dxm.noalias() = ConstMatMap<S>(dy, n, out) * ConstMatMap<S>(w, in, out).transpose();
  }
}

// dw [in, out] += x^T . dy;  db [out] += column sums of dy (db may be null).
template <typename S>
void linear_backward_weight(const S* x, const S* dy, S* dw, S* db, int64_t n, int64_t in, int64_t out) {
  ConstMatMap<S> dym(dy, n, out);
  {
    const GemmTimer timer(GemmForm::kTN, in, n, out, true);
    MatMap<S>(dw, in, out).noalias() += ConstMatMap<S>(x, n, in).transpose() * dym;
  }
  if (db != nullptr) RowMap<S>(db, out) += dym.colwise().sum();
}

// ---- norms over rows of [N, C] ------------------------------------------------------------------
// LayerNorm: xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps), y = xhat * w + b.
// RMSNorm:   xhat = x * rstd,          rstd = 1/sqrt(mean(x^2) + eps), y = xhat * w.

template <typename S>
void norm_forward(bool layer_norm, double eps, const S* x, const S* w, const S* b, S* y, S* xhat, S* rstd, int64_t n,
                  int64_t c) {
  ConstRowMap<S> wm(w, c);
  for (int64_t r = 0; r < n; ++r) {
    ConstRowMap<S> xr(x + r * c, c);
    RowMap<S> hr(xhat + r * c, c);
    const S mean = layer_norm ? xr.mean() : S(0);
    hr = xr.array() - mean;
    rstd[r] = S(1) / std::sqrt(hr.squaredNorm() / static_cast<S>(c) + static_cast<S>(eps));
    hr *= rstd[r];
    RowMap<S> yr(y + r * c, c);
    yr = hr.cwiseProduct(wm);
    if (b != nullptr) yr += ConstRowMap<S>(b, c);
  }
}

// dx = d(norm input) from dy = d(norm output); dx is overwritten, or added to when `accumulate`.
//   g = dy * w;  LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//                RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
template <typename S>
void norm_backward_input(bool layer_norm, const S* dy, const S* w, const S* xhat, const S* rstd, S* dx, int64_t n,
                         int64_t c, bool accumulate) {
  ConstRowMap<S> wm(w, c);
  RowVec<S> g(c);
  for (int64_t r = 0; r < n; ++r) {
    ConstRowMap<S> hr(xhat + r * c, c);
    g = ConstRowMap<S>(dy + r * c, c).cwiseProduct(wm);
    const S g_mean = layer_norm ? g.mean() : S(0);
    const S gh_mean = g.dot(hr) / static_cast<S>(c);
    RowMap<S> dxr(dx + r * c, c);
    if (accumulate) {
      dxr.array() += rstd[r] * (g.array() - g_mean - hr.array() * gh_mean);
    } else {
      dxr.array() = rstd[r] * (g.array() - g_mean - hr.array() * gh_mean);
    }
  }
}

// dw [C] += sum over rows of dy * xhat;  db [C] += column sums of dy (db may be null).
template <typename S>
void norm_backward_weight(const S* dy, const S* xhat, S* dw, S* db, int64_t n, int64_t c) {
  ConstMatMap<S> dym(dy, n, c);
  RowMap<S>(dw, c) += dym.cwiseProduct(ConstMatMap<S>(xhat, n, c)).colwise().sum();
  if (db != nullptr) RowMap<S>(db, c) += dym.colwise().sum();
}

// ---- activations (elementwise over `count`) -----------------------------------------------------

// GELU, tanh approximation (GPT-2's gelu_new): 0.5 u (1 + tanh(k (u + 0.044715 u^3))), k = sqrt(2/pi);
// `exact`: 0.5 u (1 + erf(u / sqrt 2)) (transformers' "gelu", torch's approximate="none").
template <typename S>
void gelu_forward(const S* u, S* out, int64_t count, bool exact = false) {
  const S k = static_cast<S>(std::sqrt(2.0 / std::numbers::pi));
  if (exact) {
    for (int64_t i = 0; i < count; ++i) out[i] = S(0.5) * u[i] * (S(1) + std::erf(u[i] * static_cast<S>(std::numbers::sqrt2 / 2)));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const S x = u[i];
    out[i] = S(0.5) * x * (S(1) + std::tanh(k * (x + S(0.044715) * x * x * x)));
  }
}

// du = dout * gelu'(u) (overwrites du); exact: gelu'(u) = Phi(u) + u phi(u).
template <typename S>
void gelu_backward(const S* u, const S* dout, S* du, int64_t count, bool exact = false) {
  const S k = static_cast<S>(std::sqrt(2.0 / std::numbers::pi));
  if (exact) {
    const S inv_sqrt2pi = static_cast<S>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    for (int64_t i = 0; i < count; ++i) {
      const S x = u[i];
      const S cdf = S(0.5) * (S(1) + std::erf(x * static_cast<S>(std::numbers::sqrt2 / 2)));
      du[i] = dout[i] * (cdf + x * inv_sqrt2pi * std::exp(S(-0.5) * x * x));
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const S x = u[i];
    const S t = std::tanh(k * (x + S(0.044715) * x * x * x));
    const S dt = k * (S(1) + S(3) * S(0.044715) * x * x);
    du[i] = dout[i] * (S(0.5) * (S(1) + t) + S(0.5) * x * (S(1) - t * t) * dt);
  }
}

template <typename S>
S sigmoid(S x) {
  return S(1) / (S(1) + std::exp(-x));
}

// SwiGLU core: out = silu(gate) * up, silu(x) = x * sigmoid(x).
template <typename S>
void swiglu_forward(const S* gate, const S* up, S* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// d_gate = dout * up * silu'(gate), silu'(x) = s (1 + x (1 - s)); d_up = dout * silu(gate).
template <typename S>
void swiglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const S s = sigmoid(gate[i]);
    d_gate[i] = dout[i] * up[i] * s * (S(1) + gate[i] * (S(1) - s));
    d_up[i] = dout[i] * gate[i] * s;
  }
}

// ReLU (OPT): out = max(u, 0); du = dout where u > 0, else 0 (overwrites du).
template <typename S>
void relu_forward(const S* u, S* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = u[i] > S(0) ? u[i] : S(0);
}
template <typename S>
void relu_backward(const S* u, const S* dout, S* du, int64_t count) {
  for (int64_t i = 0; i < count; ++i) du[i] = u[i] > S(0) ? dout[i] : S(0);
}

// GeGLU core (Gemma): out = gelu(gate) * up; d_gate = dout * up * gelu'(gate), d_up = dout * gelu(gate).
template <typename S>
void geglu_forward(const S* gate, const S* up, S* out, int64_t count, bool exact = false) {
  gelu_forward(gate, out, count, exact);
  for (int64_t i = 0; i < count; ++i) out[i] *= up[i];
}
template <typename S>
void geglu_backward(const S* gate, const S* up, const S* dout, S* d_gate, S* d_up, int64_t count, bool exact = false) {
  gelu_forward(gate, d_up, count, exact);  // d_up = gelu(gate), then times dout
  for (int64_t i = 0; i < count; ++i) {
    d_gate[i] = dout[i] * up[i];
    d_up[i] *= dout[i];
  }
  gelu_backward(gate, d_gate, d_gate, count, exact);  // elementwise, so in place is safe
}

// ---- RoPE ---------------------------------------------------------------------------------------
// Rotate-half convention (GPT-NeoX / LLaMA in HF): in each head of width D, the pair (i, i + D/2)
// at position t turns by t * base^(-2i/D). `inverse` turns back (the transpose), which maps the
// gradient of rotated values to the gradient of the unrotated ones. Works in place on `heads`
// heads starting at column `col0` of rows with stride `row_stride`; row r is at position
// pos[r mod P] of its sequence (P = pos.size(): a sequence's rows, the rank's positions under
// context parallelism).
template <typename S>
void rope_at(S* x, int64_t n, std::span<const int64_t> pos, int64_t row_stride, int64_t col0, int64_t heads, int64_t d,
             bool inverse, double base) {
  const int64_t half = d / 2, seq = static_cast<int64_t>(pos.size());
  std::vector<S> cos_t(static_cast<std::size_t>(seq * half)), sin_t(cos_t.size());
  for (int64_t t = 0; t < seq; ++t) {
    const double p = static_cast<double>(pos[static_cast<std::size_t>(t)]);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      cos_t[static_cast<std::size_t>(t * half + i)] = static_cast<S>(std::cos(angle));
      sin_t[static_cast<std::size_t>(t * half + i)] = static_cast<S>(inverse ? -std::sin(angle) : std::sin(angle));
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const S* cr = cos_t.data() + (r % seq) * half;
    const S* sr = sin_t.data() + (r % seq) * half;
    for (int64_t h = 0; h < heads; ++h) {
      S* v = x + r * row_stride + col0 + h * d;
      for (int64_t i = 0; i < half; ++i) {
        const S a = v[i], b = v[i + half];
        v[i] = a * cr[i] - b * sr[i];
        v[i + half] = b * cr[i] + a * sr[i];
      }
    }
  }
}

// Sequences of T rows at positions 0 .. T − 1.
inline std::vector<int64_t> natural_positions(int64_t seq) {
  std::vector<int64_t> pos(static_cast<std::size_t>(seq));
  for (int64_t t = 0; t < seq; ++t) pos[static_cast<std::size_t>(t)] = t;
  return pos;
}

template <typename S>
void rope(S* x, int64_t n, int64_t seq, int64_t row_stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
          double base) {
  rope_at(x, n, std::span<const int64_t>(natural_positions(seq)), row_stride, col0, heads, d, inverse, base);
}

// ---- causal grouped-query attention -------------------------------------------------------------

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding-window attention: a query sees its `window` latest keys (0: all)
  int64_t hidden() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t qkv_cols() const { return hidden() + 2 * kv_dim(); }
  int64_t group() const { return heads / kv_heads; }  // query heads per K/V head
};

// Causal grouped-query attention of query rows against key rows, the one kernel under both
// entry points below. Per sequence b: T_q query rows at q + b·T_q·q_stride (head h at column
// h·D), at positions pos[i] of the sequence, and its T_k key rows at kv + b·T_k·kv_stride (K/V
// head g's k at column g·D, its v at KV + g·D); query head h reads K/V head h / (H/G), and query
// row i sees key j iff j <= pos[i] (and, with a window w, pos[i] − j < w: transformers' Mistral
// masks j <= pos[i] − w). probs [B, H, T_q, T_k] = the masked softmax of q k^T / sqrt(D) (zeros
// where masked, so the backward below needs no mask); out [B·T_q, C].
template <typename S>
void attention_forward_rows(const S* q_rows, int64_t q_stride, std::span<const int64_t> pos, const S* kv, int64_t kv_stride,
                            int64_t tk, S* probs, S* out, const AttentionShape& a) {
  const int64_t tq = static_cast<int64_t>(pos.size()), D = a.head_dim, C = a.hidden();
  const S scale = S(1) / std::sqrt(static_cast<S>(D));
  for (int64_t b = 0; b < a.batch; ++b) {
    const S* rows = q_rows + b * tq * q_stride;
    const S* keys = kv + b * tk * kv_stride;
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t g = h / a.group();
      ConstStridedMap<S> q(rows + h * D, tq, D, Eigen::OuterStride<>(q_stride));
      ConstStridedMap<S> k(keys + g * D, tk, D, Eigen::OuterStride<>(kv_stride));
      ConstStridedMap<S> v(keys + a.kv_dim() + g * D, tk, D, Eigen::OuterStride<>(kv_stride));
      MatMap<S> p(probs + (b * a.heads + h) * tq * tk, tq, tk);
      p.noalias() = (q * k.transpose()) * scale;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t seen = pos[static_cast<std::size_t>(i)] + 1;
        const int64_t first = a.window > 0 ? std::max<int64_t>(0, seen - a.window) : 0;
        auto row = p.row(i).segment(first, seen - first);
        row = (row.array() - row.maxCoeff()).exp();
        row /= row.sum();
        p.row(i).head(first).setZero();
        p.row(i).tail(tk - seen).setZero();
      }
      StridedMap<S> o(out + b * tq * C + h * D, tq, D, Eigen::OuterStride<>(C));
      o.noalias() = p * v;
    }
  }
}

// Its backward, from dout [B·T_q, C]: dP = dO v^T,  dv += P^T dO,  dS = P * (dP - rowsum(P * dP)),
// dq = dS k / sqrt(D) (written, at dq with row stride dq_stride), dk += dS^T q / sqrt(D) (dk and dv
// added at dkv, row stride dkv_stride, laid out as kv).
template <typename S>
void attention_backward_rows(const S* q_rows, int64_t q_stride, const S* kv, int64_t kv_stride, const S* probs, int64_t tq,
                             int64_t tk, const S* dout, S* dq, int64_t dq_stride, S* dkv, int64_t dkv_stride,
                             const AttentionShape& a) {
  const int64_t D = a.head_dim, C = a.hidden();
  const S scale = S(1) / std::sqrt(static_cast<S>(D));
  Matrix<S> dp(tq, tk);
  for (int64_t b = 0; b < a.batch; ++b) {
    const S* rows = q_rows + b * tq * q_stride;
    const S* keys = kv + b * tk * kv_stride;
    S* dkeys = dkv + b * tk * dkv_stride;
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t g = h / a.group(), k0 = g * D, v0 = a.kv_dim() + g * D;
      ConstStridedMap<S> q(rows + h * D, tq, D, Eigen::OuterStride<>(q_stride));
      ConstStridedMap<S> k(keys + k0, tk, D, Eigen::OuterStride<>(kv_stride));
      ConstStridedMap<S> v(keys + v0, tk, D, Eigen::OuterStride<>(kv_stride));
      ConstStridedMap<S> d_o(dout + b * tq * C + h * D, tq, D, Eigen::OuterStride<>(C));
      ConstMatMap<S> p(probs + (b * a.heads + h) * tq * tk, tq, tk);
      StridedMap<S>(dkeys + v0, tk, D, Eigen::OuterStride<>(dkv_stride)).noalias() += p.transpose() * d_o;
      dp.noalias() = d_o * v.transpose();
      const Eigen::Matrix<S, Eigen::Dynamic, 1> pdp = p.cwiseProduct(dp).rowwise().sum();
      dp = p.cwiseProduct(dp - pdp.replicate(1, tk)) * scale;  // dS, already scaled
      StridedMap<S>(dq + b * tq * dq_stride + h * D, tq, D, Eigen::OuterStride<>(dq_stride)).noalias() = dp * k;
      StridedMap<S>(dkeys + k0, tk, D, Eigen::OuterStride<>(dkv_stride)).noalias() += dp.transpose() * q;
    }
  }
}

// The whole sequence: qkv [N, C + 2KV] = q | k | v, each row its own query and key at position
// 0 .. T − 1; probs [B, H, T, T]; out [N, C].
template <typename S>
void attention_forward(const S* qkv, S* probs, S* out, const AttentionShape& a) {
  const std::vector<int64_t> pos = natural_positions(a.seq);
  attention_forward_rows(qkv, a.qkv_cols(), std::span<const int64_t>(pos), qkv + a.hidden(), a.qkv_cols(), a.seq, probs, out, a);
}

// From dout [N, C] to dqkv [N, C + 2KV] (overwritten).
template <typename S>
void attention_backward(const S* qkv, const S* probs, const S* dout, S* dqkv, const AttentionShape& a) {
  const int64_t W = a.qkv_cols();
  MatMap<S>(dqkv, a.batch * a.seq, W).setZero();
  attention_backward_rows(qkv, W, qkv + a.hidden(), W, probs, a.seq, a.seq, dout, dqkv, W, dqkv + a.hidden(), W, a);
}

// ---- context parallelism: a rank's queries against the whole sequence's keys -----------------------
// (docs/program.md, "Context parallelism"). Each of a sequence's 2·cp chunks of L = seq/(2·cp) tokens
// goes to one rank: rank c holds chunks c and 2cp−1−c (Megatron-Core get_batch_on_this_cp_rank), its
// T_q = seq/cp rows in that order. Their positions in the sequence:
inline std::vector<int64_t> cp_positions(int64_t seq, int64_t cp, int64_t c) {
  const int64_t L = seq / (2 * cp);
  std::vector<int64_t> out;
  out.reserve(static_cast<std::size_t>(2 * L));
  for (int64_t chunk : {c, 2 * cp - 1 - c}) {
    for (int64_t i = 0; i < L; ++i) out.push_back(chunk * L + i);
  }
  return out;
}

// The rank's rows qkv [B·T_q, C + 2KV] (their own k and v unused here) attend to the sequence's
// kv [B·T_k, 2KV] (k | v, positions 0 .. T_k − 1); probs [B, H, T_q, T_k]; out [B·T_q, C].
template <typename S>
void attention_forward_cp(const S* qkv, const S* kv, std::span<const int64_t> pos, int64_t tk, S* probs, S* out,
                          const AttentionShape& a) {
  attention_forward_rows(qkv, a.qkv_cols(), pos, kv, 2 * a.kv_dim(), tk, probs, out, a);
}

// From dout [B·T_q, C]: dq [B·T_q, C] (overwritten) and this rank's part of the sequence's dK | dV,
// added to dkv [B·T_k, 2KV] (the ranks' parts sum to the whole: a reduce-scatter's input).
template <typename S>
void attention_backward_cp(const S* qkv, const S* kv, const S* probs, int64_t tq, int64_t tk, const S* dout, S* dq, S* dkv,
                           const AttentionShape& a) {
  const int64_t K2 = 2 * a.kv_dim();
  attention_backward_rows(qkv, a.qkv_cols(), kv, K2, probs, tq, tk, dout, dq, a.hidden(), dkv, K2, a);
}

// ---- softmax cross-entropy ----------------------------------------------------------------------

// logits [N, V] become probabilities in place; returns the mean over rows of -log p[target].
template <typename S>
S softmax_cross_entropy(S* logits, const int32_t* targets, int64_t n, int64_t v) {
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    RowMap<S> row(logits + r * v, v);
    const S max = row.maxCoeff();
    const S target_shifted = row[targets[r]] - max;
    row = (row.array() - max).exp();
    const S sum = row.sum();
    total += std::log(static_cast<double>(sum)) - static_cast<double>(target_shifted);
    row /= sum;
  }
  return static_cast<S>(total / static_cast<double>(n));
}

// dlogits [N, V] = (probs - onehot(targets)) * scale (overwritten); scale = dL/dloss / N for a mean.
template <typename S>
void softmax_cross_entropy_backward(const S* probs, const int32_t* targets, S scale, S* dlogits, int64_t n, int64_t v) {
  MatMap<S> d(dlogits, n, v);
  d = ConstMatMap<S>(probs, n, v) * scale;
  for (int64_t r = 0; r < n; ++r) d(r, targets[r]) -= scale;
}

}  // namespace stagecraft::executor::ops
