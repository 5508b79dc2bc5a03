// Context-parallel attention's phases behind LayerT::cp_* (layers.hpp has the contract), host
// kernels only. Internal to executor/model: include layers.hpp.
//
// B sequences; this rank holds T rows of each (its load-balanced chunk pair, positions
// Dims::positions), the sequence has T·cp; H query and G K/V heads of width D on this tp rank,
// Q = H·D, K = G·D, W = Q + 2K; N = B·T. Member order: cp blocks, block j [N, width] for (from)
// cp rank j, rows in that rank's order. Megatron-Core's variants (Transformer Engine's
// context_parallel.py):
//   p2p, all_gather  the rank's q rows attend to the whole sequence's k | v (all-gathered; the ring
//                    passes the same chunks), masked by position (ops::attention_forward_rows); in
//                    backward each rank has its rows' dq and a part of every row's dk | dv, which
//                    the reduce-scatter sums at the owners
//   a2a (Ulysses)    q | k | v all-to-all'd from (own rows, all heads) to (all rows, H/cp heads),
//                    ordinary causal attention on the whole sequence of the head group, the output
//                    all-to-all'd back; the backward mirrors it (d(out) over, d(q | k | v) back)
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "executor/model/layers.hpp"
#include "executor/model/units_impl.hpp"

namespace stagecraft::executor::detail {

struct ColSpan {
  int64_t col = 0, width = 0;
};

// Head group j's columns (a2a: H/cp query heads and the G/cp K/V heads they read): of a q | k | v
// row, or of an output row [Q].
inline std::vector<ColSpan> head_group_cols(const ops::AttentionShape& a, int64_t cp, int64_t j, bool qkv) {
  const int64_t qg = a.hidden() / cp, kg = a.kv_dim() / cp;
  if (!qkv) return {{j * qg, qg}};
  return {{j * qg, qg}, {a.hidden() + j * kg, kg}, {a.hidden() + a.kv_dim() + j * kg, kg}};
}

// dst [rows, sum of widths] = the spans of src [rows, stride]; and back.
template <typename S>
void pack_cols(const S* src, int64_t stride, const std::vector<ColSpan>& spans, S* dst, int64_t rows) {
  int64_t w = 0;
  for (const ColSpan& c : spans) w += c.width;
  for (int64_t r = 0; r < rows; ++r) {
    S* out = dst + r * w;
    for (const ColSpan& c : spans) out = std::copy_n(src + r * stride + c.col, c.width, out);
  }
}
template <typename S>
void unpack_cols(const S* src, const std::vector<ColSpan>& spans, S* dst, int64_t stride, int64_t rows) {
  int64_t w = 0;
  for (const ColSpan& c : spans) w += c.width;
  for (int64_t r = 0; r < rows; ++r) {
    const S* in = src + r * w;
    for (const ColSpan& c : spans) {
      std::copy_n(in, c.width, dst + r * stride + c.col);
      in += c.width;
    }
  }
}

// Member order [cp][B][T][w] to the sequences' rows in order [B][T·cp][w] (`to_sequence`), or back.
template <typename S>
void reorder_rows(const S* src, const Dims& d, int64_t w, S* dst, bool to_sequence) {
  const int64_t t = d.seq, full = d.full_seq();
  for (int64_t j = 0; j < d.cp.size; ++j) {
    const std::vector<int64_t> pos = ops::cp_positions(full, d.cp.size, j);
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t i = 0; i < t; ++i) {
        const int64_t block = ((j * d.batch + b) * t + i) * w, seq = (b * full + pos[static_cast<std::size_t>(i)]) * w;
        std::copy_n(src + (to_sequence ? block : seq), w, dst + (to_sequence ? seq : block));
      }
    }
  }
}
template <typename S>
void blocks_to_sequence(const S* blocks, const Dims& d, int64_t w, S* seq) {
  reorder_rows(blocks, d, w, seq, true);
}
template <typename S>
void sequence_to_blocks(const S* seq, const Dims& d, int64_t w, S* blocks) {
  reorder_rows(seq, d, w, blocks, false);
}

inline bool gathers_kv(const Dims& d) { return d.cp.comm != spec::CpComm::kA2a; }

// a2a: the shape of one head group's attention over the whole sequence.
inline ops::AttentionShape head_group_shape(const ops::AttentionShape& a, const Dims& d) {
  return {d.batch, d.full_seq(), a.heads / d.cp.size, a.kv_heads / d.cp.size, a.head_dim, a.window};
}

// y = x + mid . Wout + b (the bias and residual on tp rank 0), the attention unit's last step.
template <typename S>
void cp_out_projection(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, S* y,
                       const UnitCacheT<S, HostKernels>& c) {
  const LinearSlot& out = s.linears[1];
  const int64_t n = c.dims.rows();
  k.linear_forward(c.mid.data(), params + out.w, s.adds_residual ? at(params, out.b) : nullptr, y, n, out.in, out.out);
  if (s.adds_residual) k.add(y, c.input.data(), n * m.hidden);
}

// After the forward's last phase: full recompute keeps only the input, else the input goes (the
// backward needs the intermediates, not it).
template <typename S>
void cp_forward_done(UnitCacheT<S, HostKernels>& c) {
  if (c.cp_input_only) {
    c.release_intermediates();
    return;
  }
  c.full = true;
  std::vector<S>().swap(c.input);
}

// norm, QKV and RoPE at the rank's positions from c.input; send = k | v, or the head groups' q | k | v.
template <typename S>
void cp_project(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, S* send,
                UnitCacheT<S, HostKernels>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), W = a.qkv_cols();
  const LinearSlot& qkv = s.linears[0];
  norm_forward(k, m, s, params, c.input.data(), c);
  resize(c.qkv, n * W);
  k.linear_forward(c.a.data(), params + qkv.w, at(params, qkv.b), c.qkv.data(), n, qkv.in, qkv.out);
  rope_qk(k, m, s, c.dims, c.qkv.data(), false);
  if (gathers_kv(c.dims)) {
    pack_cols(c.qkv.data(), W, {{a.hidden(), 2 * a.kv_dim()}}, send, n);
    return;
  }
  const int64_t wg = W / c.dims.cp.size;
  for (int64_t j = 0; j < c.dims.cp.size; ++j) pack_cols(c.qkv.data(), W, head_group_cols(a, c.dims.cp.size, j, true), send + j * n * wg, n);
  std::vector<S>().swap(c.qkv);  // the a2a backward reads the head group's copy (cp_qkv)
}

template <typename S>
void cp_attend(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* received, S* out,
               UnitCacheT<S, HostKernels>& c) {
  const Dims& d = c.dims;
  const ops::AttentionShape a = attention_shape(m, s, d);
  const int64_t n = d.rows(), full = d.full_seq();
  if (gathers_kv(d)) {
    const int64_t k2 = 2 * a.kv_dim();
    std::vector<S> kv(static_cast<std::size_t>(d.batch * full * k2));
    blocks_to_sequence(received, d, k2, kv.data());
    resize(c.probs, d.batch * a.heads * d.seq * full);
    resize(c.mid, n * a.hidden());
    const std::vector<int64_t> pos = d.positions();
    ops::attention_forward_rows(c.qkv.data(), a.qkv_cols(), std::span<const int64_t>(pos), kv.data(), k2, full,
                                c.probs.data(), c.mid.data(), a);
    k.round(c.mid.data(), n * a.hidden());
    cp_out_projection(k, m, s, params, out, c);
    cp_forward_done(c);
    return;
  }
  const ops::AttentionShape g = head_group_shape(a, d);
  const int64_t wg = g.qkv_cols(), qg = g.hidden();
  resize(c.cp_qkv, d.batch * full * wg);
  blocks_to_sequence(received, d, wg, c.cp_qkv.data());
  resize(c.probs, d.batch * g.heads * full * full);
  std::vector<S> mid(static_cast<std::size_t>(d.batch * full * qg));
  ops::attention_forward(c.cp_qkv.data(), c.probs.data(), mid.data(), g);
  k.round(mid.data(), static_cast<int64_t>(mid.size()));
  sequence_to_blocks(mid.data(), d, qg, out);
}

template <typename S>
void cp_finish_forward(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* received, S* y,
                       UnitCacheT<S, HostKernels>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), cp = c.dims.cp.size, qg = a.hidden() / cp;
  resize(c.mid, n * a.hidden());
  for (int64_t j = 0; j < cp; ++j) unpack_cols(received + j * n * qg, head_group_cols(a, cp, j, false), c.mid.data(), a.hidden(), n);
  cp_out_projection(k, m, s, params, y, c);
  cp_forward_done(c);
}

template <typename S>
void cp_backward_send(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* send,
                      UnitCacheT<S, HostKernels>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), cp = c.dims.cp.size;
  k.assign(c.d_out, dy, n * m.hidden);
  if (gathers_kv(c.dims)) {
    pack_cols(c.qkv.data(), a.qkv_cols(), {{a.hidden(), 2 * a.kv_dim()}}, send, n);
    return;
  }
  const LinearSlot& out = s.linears[1];
  std::vector<S> d_mid(static_cast<std::size_t>(n * a.hidden()));
  k.linear_backward_input(dy, params + out.w, d_mid.data(), n, out.in, out.out, false);
  const int64_t qg = a.hidden() / cp;
  for (int64_t j = 0; j < cp; ++j) pack_cols(d_mid.data(), a.hidden(), head_group_cols(a, cp, j, false), send + j * n * qg, n);
}

template <typename S>
void cp_backward_attend(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* received, S* send,
                        UnitCacheT<S, HostKernels>& c) {
  const Dims& d = c.dims;
  const ops::AttentionShape a = attention_shape(m, s, d);
  const int64_t n = d.rows(), full = d.full_seq(), W = a.qkv_cols();
  if (gathers_kv(d)) {
    const int64_t k2 = 2 * a.kv_dim();
    std::vector<S> kv(static_cast<std::size_t>(d.batch * full * k2)), dkv(kv.size(), S(0));
    blocks_to_sequence(received, d, k2, kv.data());
    const LinearSlot& out = s.linears[1];
    std::vector<S> d_mid(static_cast<std::size_t>(n * a.hidden()));
    k.linear_backward_input(c.d_out.data(), params + out.w, d_mid.data(), n, out.in, out.out, false);
    resize(c.d_pre, n * W);  // dq now (columns [0, Q)), this rank's dk | dv at the finish
    ops::attention_backward_rows(c.qkv.data(), W, kv.data(), k2, c.probs.data(), d.seq, full, d_mid.data(), c.d_pre.data(), W,
                                 dkv.data(), k2, a);
    k.round_columns(c.d_pre.data(), n, W, 0, a.hidden());
    k.round(dkv.data(), static_cast<int64_t>(dkv.size()));
    sequence_to_blocks(dkv.data(), d, k2, send);
    return;
  }
  const ops::AttentionShape g = head_group_shape(a, d);
  std::vector<S> d_mid(static_cast<std::size_t>(d.batch * full * g.hidden())),
      d_qkv(static_cast<std::size_t>(d.batch * full * g.qkv_cols()));
  blocks_to_sequence(received, d, g.hidden(), d_mid.data());
  ops::attention_backward(c.cp_qkv.data(), c.probs.data(), d_mid.data(), d_qkv.data(), g);
  k.round(d_qkv.data(), static_cast<int64_t>(d_qkv.size()));
  sequence_to_blocks(d_qkv.data(), d, g.qkv_cols(), send);
}

// d(q | k | v) of the rank's rows complete: un-RoPE, the QKV projection's input gradient, and the
// norm's (or, tp > 1, its partial d(norm output) for finish_input_grad).
template <typename S>
void cp_backward_finish(HostKernels& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* received, S* dx,
                        UnitCacheT<S, HostKernels>& c) {
  const ops::AttentionShape a = attention_shape(m, s, c.dims);
  const int64_t n = c.dims.rows(), cp = c.dims.cp.size, W = a.qkv_cols(), h = m.hidden;
  if (gathers_kv(c.dims)) {
    unpack_cols(received, {{a.hidden(), 2 * a.kv_dim()}}, c.d_pre.data(), W, n);
  } else {
    resize(c.d_pre, n * W);
    for (int64_t j = 0; j < cp; ++j) unpack_cols(received + j * n * (W / cp), head_group_cols(a, cp, j, true), c.d_pre.data(), W, n);
  }
  rope_qk(k, m, s, c.dims, c.d_pre.data(), true);
  const LinearSlot& qkv = s.linears[0];
  resize(c.d_a, n * h);
  k.linear_backward_input(c.d_pre.data(), params + qkv.w, c.d_a.data(), n, qkv.in, qkv.out, false);
  if (s.tp > 1) {
    k.copy(dx, c.d_a.data(), n * h);
    return;
  }
  norm_backward_input(k, m, s, params, c.d_out.data(), dx, c);
}

}  // namespace stagecraft::executor::detail
