// The math of each unit kind behind Layer (layers.hpp), composed once over a kernel set K: the
// host's (HostKernels, host_kernels.hpp: the CPU model math of ops.hpp) or a device's
// (executor/cuda/device_kernels.hpp). Internal to executor/model and executor/cuda: callers use
// LayerT, which checks buffer sizes and token ids before these run. Every pointer is K's memory;
// only K's calls touch the elements.
//
// Shape legend: N = B*T rows, C hidden, V vocab; dims and token ids come from the cache.
//
// Units:
//   embedding  x [N, C] = wte[token] + wpe[position + position_offset] (learned positions only;
//              OPT's table starts its positions 2 rows in). Tensor parallelism (Megatron's
//              VocabParallelEmbedding): rank r looks up only the tokens of its vocabulary slice
//              (0 for the others) and adds wpe on rank 0, so the sum over the ranks is the
//              embedding; wpe's gradient is the full one on every rank.
//   attention  y = x + out(attn(rope(qkv(norm1(x))))), causal, grouped-query (this tp rank's
//              heads; layers.hpp says what tp > 1 leaves partial):
//                a [N, C] = norm1(x);  qkv [N, Q + 2KV] = a . Wqkv + b;  with qk_norm (Qwen3, OLMoE)
//                q and k each through a norm of the model's kind — per head over head_dim, or with
//                qk_norm_whole over the whole projection (a row of Q, of KV);  RoPE on q and k (rope models)
//                mid [N, Q] = per head softmax(q k^T / sqrt(D)) v;  y = x + mid . Wout + b
//              Q = heads * head_dim: C unless the model's head_dim says otherwise.
//   mlp        y = x + mlp(norm2(x)), F this tp rank's share of ffn_hidden:
//                gelu / relu:    pre [N, F] = a . Wup + b;  mid = act(pre);        y = x + mid . Wdown + b
//                swiglu / geglu: pre = a . Wgate + b, pre2 = a . Wup + b;  mid = act(pre) * pre2
//   head       a = normf(x); logits [N, V] = a . W with W = wte^T (tied) or lm_head.w [C x V];
//              loss = mean over the N rows of the softmax cross-entropy against the targets.
//              Tensor parallelism (Megatron-LM's VocabParallelCrossEntropy, host only): rank r
//              has the logits z of its vocabulary slice [v0, v0 + v); per row it gives max m, sum
//              s = sum exp(z - m) and the target's logit t (0 off its slice); over the ranks
//              M = max m, S = sum s * exp(m - M), T = sum t; then loss = mean(M + log S - T) and
//              dlogits = (exp(z - (M + log S)) - onehot) * dloss / N.
// The norms' weight gradients are Layer's (norm_backward_weight).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/ops.hpp"

namespace stagecraft::executor::detail {

// Where the unit's tensors are in the layout (layers.cpp).
UnitSlots resolve_slots(const ParamLayout& layout, int64_t unit);

template <typename S>
const S* at(const S* base, int64_t offset) {
  return offset < 0 ? nullptr : base + offset;
}
template <typename S>
S* at(S* base, int64_t offset) {
  return offset < 0 ? nullptr : base + offset;
}

template <typename V>
void resize(V& v, int64_t n) {
  v.resize(static_cast<std::size_t>(n));
}

// a = norm(x); keeps xhat and rstd for backward.
template <typename S, typename K>
void norm_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden;
  resize(c.xhat, n * h);
  resize(c.rstd, n);
  resize(c.a, n * h);
  k.norm_forward(m.norm == spec::Norm::kLayerNorm, m.norm_eps, x, params + s.norm_w, at(params, s.norm_b), c.a.data(),
                 c.xhat.data(), c.rstd.data(), n, h);
}

// dx = residual + d(norm input) from c.d_a; `residual` is dy for a sublayer, null for the head.
// c.d_a covers rows [c.norm_row0, + its rows) (all rows but under sequence parallelism), and so
// do dx and the residual's rows read.
template <typename S, typename K>
void norm_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* residual, S* dx,
                         const UnitCacheT<S, K>& c) {
  const int64_t h = m.hidden, n = static_cast<int64_t>(c.d_a.size()) / h, r0 = c.norm_row0;
  if (residual != nullptr) k.copy(dx, residual + r0 * h, n * h);
  k.norm_backward_input(m.norm == spec::Norm::kLayerNorm, c.d_a.data(), params + s.norm_w, c.xhat.data() + r0 * h,
                        c.rstd.data() + r0, dx, n, h, residual != nullptr);
}

template <typename S, typename K>
void norm_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, const UnitCacheT<S, K>& c) {
  const int64_t h = m.hidden, n = static_cast<int64_t>(c.d_a.size()) / h;
  k.norm_backward_weight(c.d_a.data(), c.xhat.data() + c.norm_row0 * h, grads + s.norm_w, at(grads, s.norm_b), n, h);
}

template <typename S, typename K>
void linear_backward_weight(K& k, const LinearSlot& l, const S* x, const S* dy, S* grads, int64_t n) {
  k.linear_backward_weight(x, dy, grads + l.w, at(grads, l.b), n, l.in, l.out);
}

// ---- embedding --------------------------------------------------------------------------------

[[noreturn]] inline void cp_on_device() {
  throw std::logic_error("context parallelism runs on the host kernels only");
}

template <typename S, typename K>
void embedding_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, S* y, UnitCacheT<S, K>& c) {
  const bool with_wpe = s.wpe >= 0 && s.adds_residual;
  const S* wpe = with_wpe ? params + s.wpe : nullptr;
  if (c.dims.cp.size > 1) {  // the rank's positions
    if constexpr (K::kHost) {
      const std::vector<int64_t> pos = c.dims.positions();
      k.embedding_forward(c.tokens.data(), params + s.wte, wpe, y, c.dims.rows(), m.hidden, c.dims.seq, s.vocab0, s.vocab,
                          m.position_offset, pos.data());
      return;
    } else {
      cp_on_device();
    }
  }
  k.embedding_forward(c.tokens.data(), params + s.wte, wpe, y, c.dims.rows(), m.hidden, c.dims.seq, s.vocab0, s.vocab,
                      m.position_offset);
}

// No input gradient (the input is token ids); keeps dy for the table gradients.
template <typename S, typename K>
void embedding_backward_input(K& k, const spec::Model& m, const S* dy, UnitCacheT<S, K>& c) {
  k.assign(c.d_out, dy, c.dims.rows() * m.hidden);
}

// dwte[token] += dy row; dwpe[position] += dy row.
template <typename S, typename K>
void embedding_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  S* dwpe = s.wpe >= 0 ? grads + s.wpe : nullptr;
  if (c.dims.cp.size > 1) {
    if constexpr (K::kHost) {
      const std::vector<int64_t> pos = c.dims.positions();
      k.embedding_backward_weight(c.tokens.data(), c.d_out.data(), grads + s.wte, dwpe, c.dims.rows(), m.hidden, c.dims.seq,
                                  s.vocab0, s.vocab, m.position_offset, pos.data());
      return;
    } else {
      cp_on_device();
    }
  }
  k.embedding_backward_weight(c.tokens.data(), c.d_out.data(), grads + s.wte, dwpe, c.dims.rows(), m.hidden, c.dims.seq,
                              s.vocab0, s.vocab, m.position_offset);
}

// ---- attention --------------------------------------------------------------------------------

// This rank's heads (all of them when tp = 1).
inline ops::AttentionShape attention_shape(const spec::Model& m, const UnitSlots& s, Dims d) {
  return {d.batch, d.seq, s.heads, s.kv_heads, m.head_dim(), s.window};
}

// Rotates (or, inverse, un-rotates) the q and k columns of a [N, Q + 2KV] buffer in place, each row
// at its sequence position (Dims::positions).
template <typename S, typename K>
void rope_qk(K& k, const spec::Model& m, const UnitSlots& s, Dims d, S* qkv, bool inverse) {
  if (m.position != spec::Position::kRope) return;
  const ops::AttentionShape a = attention_shape(m, s, d);
  if (d.cp.size > 1) {  // the rank's positions
    if constexpr (K::kHost) {
      const std::vector<int64_t> pos = d.positions();
      k.rope_at(qkv, d.rows(), std::span<const int64_t>(pos), a.qkv_cols(), 0, a.heads, a.head_dim, inverse, m.rope_theta);
      k.rope_at(qkv, d.rows(), std::span<const int64_t>(pos), a.qkv_cols(), a.hidden(), a.kv_heads, a.head_dim, inverse,
                m.rope_theta);
      return;
    } else {
      cp_on_device();
    }
  }
  k.rope(qkv, d.rows(), d.seq, a.qkv_cols(), 0, a.heads, a.head_dim, inverse, m.rope_theta);
  k.rope(qkv, d.rows(), d.seq, a.qkv_cols(), a.hidden(), a.kv_heads, a.head_dim, inverse, m.rope_theta);
}

[[noreturn]] inline void qk_norm_on_device() {
  throw std::logic_error("query and key norms (qk_norm) run on the host kernels only");
}

// The q (or k) columns [col, col + width) of the [n, cols] qkv buffer as contiguous rows.
template <typename S>
void take_columns(const S* qkv, int64_t n, int64_t cols, int64_t col, int64_t width, S* out) {
  for (int64_t r = 0; r < n; ++r) std::copy(qkv + r * cols + col, qkv + r * cols + col + width, out + r * width);
}
template <typename S>
void put_columns(const S* in, int64_t n, int64_t cols, int64_t col, int64_t width, S* qkv) {
  for (int64_t r = 0; r < n; ++r) std::copy(in + r * width, in + (r + 1) * width, qkv + r * cols + col);
}

// qk_norm forward on the projection (before RoPE): q's columns [0, Q) and k's [Q, Q + KV), each as
// rows of the norm's width (head_dim, or the whole projection), normalised in place.
template <typename S, typename K>
void qk_norm_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const ops::AttentionShape& a, S* qkv,
                     UnitCacheT<S, K>& c) {
  if (!m.qk_norm) return;
  if constexpr (K::kHost) {
    const int64_t n = c.dims.rows(), cols = a.qkv_cols(), q = a.hidden(), kv = a.kv_heads * a.head_dim;
    const bool ln = m.norm == spec::Norm::kLayerNorm;
    std::vector<S> in, outv;
    auto one = [&](int64_t col, int64_t width, int64_t w_slot, int64_t b_slot, int64_t norm_width, auto& hat, auto& rstd) {
      const int64_t rows = n * width / norm_width;
      in.resize(static_cast<std::size_t>(n * width));
      outv.resize(in.size());
      take_columns(qkv, n, cols, col, width, in.data());
      resize(hat, n * width);
      resize(rstd, rows);
      k.norm_forward(ln, m.norm_eps, in.data(), params + w_slot, at(params, b_slot), outv.data(), hat.data(), rstd.data(), rows,
                     norm_width);
      put_columns(outv.data(), n, cols, col, width, qkv);
    };
    one(0, q, s.q_norm_w, s.q_norm_b, m.q_norm_width(), c.qn_hat, c.qn_rstd);
    one(q, kv, s.k_norm_w, s.k_norm_b, m.k_norm_width(), c.kn_hat, c.kn_rstd);
  } else {
    qk_norm_on_device();
  }
}

// qk_norm backward: d(norm output) in the q and k columns of `d` (after RoPE's inverse) kept for
// the weights (qn_dy, kn_dy) and replaced by d(norm input).
template <typename S, typename K>
void qk_norm_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const ops::AttentionShape& a,
                            S* d, UnitCacheT<S, K>& c) {
  if (!m.qk_norm) return;
  if constexpr (K::kHost) {
    const int64_t n = c.dims.rows(), cols = a.qkv_cols(), q = a.hidden(), kv = a.kv_heads * a.head_dim;
    const bool ln = m.norm == spec::Norm::kLayerNorm;
    std::vector<S> dx;
    auto one = [&](int64_t col, int64_t width, int64_t w_slot, int64_t norm_width, const auto& hat, const auto& rstd, auto& dy) {
      resize(dy, n * width);
      take_columns(d, n, cols, col, width, dy.data());
      dx.resize(static_cast<std::size_t>(n * width));
      k.norm_backward_input(ln, dy.data(), params + w_slot, hat.data(), rstd.data(), dx.data(), n * width / norm_width,
                            norm_width, false);
      put_columns(dx.data(), n, cols, col, width, d);
    };
    one(0, q, s.q_norm_w, m.q_norm_width(), c.qn_hat, c.qn_rstd, c.qn_dy);
    one(q, kv, s.k_norm_w, m.k_norm_width(), c.kn_hat, c.kn_rstd, c.kn_dy);
  } else {
    qk_norm_on_device();
  }
}

template <typename S, typename K>
void qk_norm_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  if (!m.qk_norm) return;
  const int64_t qw = m.q_norm_width(), kw = m.k_norm_width();
  k.norm_backward_weight(c.qn_dy.data(), c.qn_hat.data(), grads + s.q_norm_w, at(grads, s.q_norm_b),
                         static_cast<int64_t>(c.qn_dy.size()) / qw, qw);
  k.norm_backward_weight(c.kn_dy.data(), c.kn_hat.data(), grads + s.k_norm_w, at(grads, s.k_norm_b),
                         static_cast<int64_t>(c.kn_dy.size()) / kw, kw);
}

template <typename S, typename K>
void attention_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y,
                       UnitCacheT<S, K>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), h = m.hidden, q = a.hidden();
  const LinearSlot& qkv = s.linears[0];
  const LinearSlot& out = s.linears[1];
  norm_forward(k, m, s, params, x, c);
  resize(c.qkv, n * a.qkv_cols());
  k.linear_forward(c.a.data(), params + qkv.w, at(params, qkv.b), c.qkv.data(), n, qkv.in, qkv.out);
  qk_norm_forward(k, m, s, params, a, c.qkv.data(), c);
  rope_qk(k, m, s, c.dims, c.qkv.data(), false);
  resize(c.probs, a.batch * a.heads * a.seq * a.seq);
  resize(c.mid, n * q);
  k.attention_forward(c.qkv.data(), c.probs.data(), c.mid.data(), a);
  // row-parallel: the bias and the residual once, on tp rank 0 (the sum over ranks has them once)
  k.linear_forward(c.mid.data(), params + out.w, s.adds_residual ? at(params, out.b) : nullptr, y, n, out.in, out.out);
  if (s.adds_residual) k.add(y, x, n * h);
}

template <typename S, typename K>
void attention_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                              UnitCacheT<S, K>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), h = m.hidden;
  const LinearSlot& qkv = s.linears[0];
  const LinearSlot& out = s.linears[1];
  k.assign(c.d_out, dy, n * h);
  typename K::template Vec<S> d_mid;
  resize(d_mid, n * a.hidden());
  k.linear_backward_input(dy, params + out.w, d_mid.data(), n, out.in, out.out, false);
  resize(c.d_pre, n * a.qkv_cols());
  k.attention_backward(c.qkv.data(), c.probs.data(), d_mid.data(), c.d_pre.data(), a);
  rope_qk(k, m, s, c.dims, c.d_pre.data(), true);
  qk_norm_backward_input(k, m, s, params, a, c.d_pre.data(), c);
  resize(c.d_a, n * h);
  k.linear_backward_input(c.d_pre.data(), params + qkv.w, c.d_a.data(), n, qkv.in, qkv.out, false);
  if (s.tp > 1) {  // this rank's part of d_a: summed over tp, then finish_input_grad
    k.copy(dx, c.d_a.data(), static_cast<int64_t>(c.d_a.size()));
    return;
  }
  norm_backward_input(k, m, s, params, dy, dx, c);
}

template <typename S, typename K>
void attention_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows();
  linear_backward_weight(k, s.linears[1], c.mid.data(), c.d_out.data(), grads, n);
  linear_backward_weight(k, s.linears[0], c.a.data(), c.d_pre.data(), grads, n);
  qk_norm_backward_weight(k, m, s, grads, c);
}

// ---- MLP ----------------------------------------------------------------------------------------
// The MLP's core on rows already normalised (a [n, h] -> y [n, h] through width f): the dense MLP
// unit's, each routed expert's (its rows of the permuted tokens, its slice of the stacked weights)
// and the shared experts'. `linears` are the MLP's (gelu, relu: up, down; swiglu, geglu: gate, up,
// down); `down_bias` adds the output projection's bias (row-parallel: on tp rank 0 only).

template <typename S, typename K>
void mlp_core_forward(K& k, const spec::Model& m, std::span<const LinearSlot> linears, const S* params, const S* a,
                      S* pre, S* pre2, S* mid, S* y, int64_t n, int64_t h, int64_t f, bool down_bias) {
  const LinearSlot& first = linears[0];  // gelu, relu: up; swiglu, geglu: gate
  const LinearSlot& down = linears.back();
  k.linear_forward(a, params + first.w, at(params, first.b), pre, n, h, f);
  if (spec::gated(m.mlp)) {
    const LinearSlot& up = linears[1];
    k.linear_forward(a, params + up.w, at(params, up.b), pre2, n, h, f);
    if (m.mlp == spec::Mlp::kSwiglu) {
      k.swiglu_forward(pre, pre2, mid, n * f);
    } else {
      k.geglu_forward(pre, pre2, mid, n * f, m.gelu_exact);
    }
  } else if (m.mlp == spec::Mlp::kRelu) {
    k.relu_forward(pre, mid, n * f);
  } else {
    k.gelu_forward(pre, mid, n * f, m.gelu_exact);
  }
  k.linear_forward(mid, params + down.w, down_bias ? at(params, down.b) : nullptr, y, n, f, h);
}

// d_a (= when `accumulate`, += ) the core's input gradient from dy; leaves d_pre (and d_pre2) for
// the weight gradients. `d_mid` is scratch of n * f.
template <typename S, typename K>
void mlp_core_backward_input(K& k, const spec::Model& m, std::span<const LinearSlot> linears, const S* params, const S* dy,
                             const S* pre, const S* pre2, S* d_mid, S* d_pre, S* d_pre2, S* d_a, int64_t n, int64_t h,
                             int64_t f, bool accumulate) {
  const LinearSlot& first = linears[0];
  const LinearSlot& down = linears.back();
  k.linear_backward_input(dy, params + down.w, d_mid, n, f, h, false);
  if (spec::gated(m.mlp)) {
    const LinearSlot& up = linears[1];
    if (m.mlp == spec::Mlp::kSwiglu) {
      k.swiglu_backward(pre, pre2, d_mid, d_pre, d_pre2, n * f);
    } else {
      k.geglu_backward(pre, pre2, d_mid, d_pre, d_pre2, n * f, m.gelu_exact);
    }
    k.linear_backward_input(d_pre, params + first.w, d_a, n, h, f, accumulate);
    k.linear_backward_input(d_pre2, params + up.w, d_a, n, h, f, true);
  } else {
    if (m.mlp == spec::Mlp::kRelu) {
      k.relu_backward(pre, d_mid, d_pre, n * f);
    } else {
      k.gelu_backward(pre, d_mid, d_pre, n * f, m.gelu_exact);
    }
    k.linear_backward_input(d_pre, params + first.w, d_a, n, h, f, accumulate);
  }
}

template <typename S, typename K>
void mlp_core_backward_weight(K& k, const spec::Model& m, std::span<const LinearSlot> linears, const S* a, const S* mid,
                              const S* dy, const S* d_pre, const S* d_pre2, S* grads, int64_t n) {
  linear_backward_weight(k, linears.back(), mid, dy, grads, n);
  linear_backward_weight(k, linears[0], a, d_pre, grads, n);
  if (spec::gated(m.mlp)) linear_backward_weight(k, linears[1], a, d_pre2, grads, n);
}

template <typename S, typename K>
void mlp_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, f = s.ffn;
  norm_forward(k, m, s, params, x, c);
  resize(c.pre, n * f);
  resize(c.mid, n * f);
  if (spec::gated(m.mlp)) resize(c.pre2, n * f);
  // row-parallel: the bias and the residual once, on tp rank 0
  mlp_core_forward(k, m, std::span<const LinearSlot>(s.linears), params, c.a.data(), c.pre.data(), c.pre2.data(),
                   c.mid.data(), y, n, h, f, s.adds_residual);
  if (s.adds_residual) k.add(y, x, n * h);
}

template <typename S, typename K>
void mlp_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                        UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, f = s.ffn;
  k.assign(c.d_out, dy, n * h);
  typename K::template Vec<S> d_mid;
  resize(d_mid, n * f);
  resize(c.d_pre, n * f);
  resize(c.d_a, n * h);
  if (spec::gated(m.mlp)) resize(c.d_pre2, n * f);
  mlp_core_backward_input(k, m, std::span<const LinearSlot>(s.linears), params, dy, c.pre.data(), c.pre2.data(),
                          d_mid.data(), c.d_pre.data(), c.d_pre2.data(), c.d_a.data(), n, h, f, false);
  if (s.tp > 1) {  // this rank's part of d_a: summed over tp, then finish_input_grad
    k.copy(dx, c.d_a.data(), static_cast<int64_t>(c.d_a.size()));
    return;
  }
  norm_backward_input(k, m, s, params, dy, dx, c);
}

template <typename S, typename K>
void mlp_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  mlp_core_backward_weight(k, m, std::span<const LinearSlot>(s.linears), c.a.data(), c.mid.data(), c.d_out.data(),
                           c.d_pre.data(), c.d_pre2.data(), grads, c.dims.rows());
}

// ---- head -------------------------------------------------------------------------------------
// The logits' GEMMs are the linear forms: untied W = lm_head [C, V] is a linear [in C, out V]; the
// tied table wte [V, C] is a linear [in V, out C] used transposed (a . wte^T is its input-gradient
// form, dlogits . wte its forward, and the table's gradient dlogits^T . a its weight-gradient form).

template <typename S, typename K>
S head_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = m.vocab;
  norm_forward(k, m, s, params, x, c);
  resize(c.probs, n * v);
  if (s.lm_head >= 0) {
    k.linear_forward(c.a.data(), params + s.lm_head, static_cast<const S*>(nullptr), c.probs.data(), n, h, v);
  } else {
    k.linear_backward_input(c.a.data(), params + s.wte, c.probs.data(), n, v, h, false);
  }
  return k.softmax_cross_entropy(c.probs.data(), c.tokens.data(), n, v);
}

// The tensor-parallel head's statistics and gradients, host only (Eigen on this rank's slice).
template <typename S, typename K>
void head_backward_input_partial(K& k, const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* d_a_part,
                                 UnitCacheT<S, K>& c);

// dlogits = (probs - onehot) * dloss / N;  d_a = dlogits . W^T;  dx = normf backward.
template <typename S, typename K>
void head_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* dx,
                         UnitCacheT<S, K>& c) {
  if (s.tp > 1) {
    head_backward_input_partial(k, m, s, params, dloss, dx, c);
    return;
  }
  const int64_t n = c.dims.rows(), h = m.hidden, v = m.vocab;
  resize(c.d_out, n * v);
  k.softmax_cross_entropy_backward(c.probs.data(), c.tokens.data(), dloss / static_cast<S>(n), c.d_out.data(), n, v);
  resize(c.d_a, n * h);
  if (s.lm_head >= 0) {
    k.linear_backward_input(c.d_out.data(), params + s.lm_head, c.d_a.data(), n, h, v, false);
  } else {
    k.linear_forward(c.d_out.data(), params + s.wte, static_cast<const S*>(nullptr), c.d_a.data(), n, v, h);
  }
  norm_backward_input(k, m, s, params, static_cast<const S*>(nullptr), dx, c);
}

// This rank's LM head columns [h x v] (the valid ones of its [h x vocab_rows] shard), or its table rows [v x h].
template <typename S>
auto lm_head_cols(const UnitSlots& s, const S* base, int64_t h) {
  return ops::ConstMatMap<S>(base + s.lm_head, h, s.vocab_rows).leftCols(s.vocab);
}
template <typename S>
auto table_rows(const UnitSlots& s, const S* base, int64_t h) {
  return ops::ConstMatMap<S>(base + s.wte, s.vocab_rows, h).topRows(s.vocab);
}

[[noreturn]] inline void tp_head_on_device() {
  throw std::logic_error("the tensor-parallel head (vocabulary-parallel cross-entropy) runs on the host kernels only");
}

template <typename S, typename K>
void head_forward_partial(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y,
                          UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    tp_head_on_device();
  } else {
    const int64_t n = c.dims.rows(), h = m.hidden, v = s.vocab;
    norm_forward(k, m, s, params, x, c);
    resize(c.probs, n * v);
    ops::MatMap<S> logits(c.probs.data(), n, v);
    {
      const GemmTimer timer(s.lm_head >= 0 ? GemmForm::kNN : GemmForm::kNT, n, h, v, false);
      if (s.lm_head >= 0) {
        logits.noalias() = ops::ConstMatMap<S>(c.a.data(), n, h) * lm_head_cols(s, params, h);
      } else {
        logits.noalias() = ops::ConstMatMap<S>(c.a.data(), n, h) * table_rows(s, params, h).transpose();
      }
    }
    k.round(c.probs.data(), n * v);  // the GEMM's stored logits
    for (int64_t i = 0; i < n; ++i) {
      const S* z = c.probs.data() + i * v;
      S mx = -std::numeric_limits<S>::infinity();
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, z[j]);
      S sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(z[j] - mx);
      const int64_t target = c.tokens[static_cast<std::size_t>(i)] - s.vocab0;
      y[i] = mx;
      y[n + i] = sum;
      y[2 * n + i] = target >= 0 && target < v ? z[target] : S(0);
    }
  }
}

template <typename S, typename K>
S head_finish_loss(const S* reduced, int64_t n, UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    tp_head_on_device();
  } else {
    resize(c.lse, n);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      c.lse[static_cast<std::size_t>(i)] = reduced[i] + std::log(reduced[n + i]);
      total += static_cast<double>(c.lse[static_cast<std::size_t>(i)] - reduced[2 * n + i]);
    }
    return static_cast<S>(total / static_cast<double>(n));
  }
}

template <typename S, typename K>
void head_backward_input_partial(K& k, const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* d_a_part,
                                 UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    (void)k;
    tp_head_on_device();
  } else {
    const int64_t n = c.dims.rows(), h = m.hidden, v = s.vocab;
    if (static_cast<int64_t>(c.lse.size()) != n) throw std::logic_error("head backward before its loss was reduced over tp");
    resize(c.d_out, n * v);
    const S scale = dloss / static_cast<S>(n);
    for (int64_t i = 0; i < n; ++i) {
      const S* z = c.probs.data() + i * v;
      S* d = c.d_out.data() + i * v;
      const S lse = c.lse[static_cast<std::size_t>(i)];
      for (int64_t j = 0; j < v; ++j) d[j] = std::exp(z[j] - lse) * scale;
      const int64_t target = c.tokens[static_cast<std::size_t>(i)] - s.vocab0;
      if (target >= 0 && target < v) d[target] -= scale;
    }
    k.round(c.d_out.data(), n * v);
    resize(c.d_a, n * h);
    ops::MatMap<S> d_a(c.d_a.data(), n, h);
    ops::ConstMatMap<S> d_logits(c.d_out.data(), n, v);
    {
      const GemmTimer timer(s.lm_head >= 0 ? GemmForm::kNT : GemmForm::kNN, n, v, h, false);
      if (s.lm_head >= 0) {
        d_a.noalias() = d_logits * lm_head_cols(s, params, h).transpose();
      } else {
        d_a.noalias() = d_logits * table_rows(s, params, h);
      }
    }
    k.round(c.d_a.data(), n * h);
    std::copy(c.d_a.begin(), c.d_a.end(), d_a_part);
  }
}

// d lm_head [C, V] += a^T . dlogits;  tied: d wte [V, C] += dlogits^T . a (this rank's slice).
template <typename S, typename K>
void head_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden;
  if (s.tp > 1) {
    if constexpr (!K::kHost) {
      tp_head_on_device();
    } else {
      const int64_t v = s.vocab;
      ops::ConstMatMap<S> a(c.a.data(), n, h);
      ops::ConstMatMap<S> d_logits(c.d_out.data(), n, v);
      const GemmTimer timer(GemmForm::kTN, s.lm_head >= 0 ? h : v, n, s.lm_head >= 0 ? v : h, true);
      if (s.lm_head >= 0) {
        ops::MatMap<S>(grads + s.lm_head, h, s.vocab_rows).leftCols(v).noalias() += a.transpose() * d_logits;
      } else {
        ops::MatMap<S>(grads + s.wte, s.vocab_rows, h).topRows(v).noalias() += d_logits.transpose() * a;
      }
    }
    return;
  }
  const int64_t v = m.vocab;
  if (s.lm_head >= 0) {
    k.linear_backward_weight(c.a.data(), c.d_out.data(), grads + s.lm_head, static_cast<S*>(nullptr), n, h, v);
  } else {
    k.linear_backward_weight(c.d_out.data(), c.a.data(), grads + s.wte, static_cast<S*>(nullptr), n, v, h);
  }
}

}  // namespace stagecraft::executor::detail
