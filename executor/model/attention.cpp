// Attention sublayer unit: y = x + out(attn(rope(qkv(norm1(x))))), causal, grouped-query (this tp
// rank's heads; layers.hpp says what tp > 1 leaves partial). The norm's weight gradient is Layer's.
//   a [N, C] = norm1(x);  qkv [N, Q + 2KV] = a . Wqkv + b;  RoPE on q and k (rope models)
//   mid [N, Q] = per head softmax(q k^T / sqrt(D)) v;  y = x + mid . Wout + b
// Q = heads * head_dim: C unless the model's head_dim says otherwise.
#include "executor/model/units.hpp"

namespace stagecraft::executor::detail {

namespace {

// This rank's heads (all of them when tp = 1).
ops::AttentionShape shape_of(const spec::Model& m, const UnitSlots& s, Dims d) {
  return {d.batch, d.seq, s.heads, s.kv_heads, m.head_dim()};
}

// Rotates (or, inverse, un-rotates) the q and k columns of a [N, Q + 2KV] buffer in place.
template <typename S>
void rope_qk(const spec::Model& m, const UnitSlots& s, Dims d, S* qkv, bool inverse) {
  if (m.position != spec::Position::kRope) return;
  const ops::AttentionShape a = shape_of(m, s, d);
  ops::rope(qkv, d.rows(), d.seq, a.qkv_cols(), 0, a.heads, a.head_dim, inverse, m.rope_theta);
  ops::rope(qkv, d.rows(), d.seq, a.qkv_cols(), a.hidden(), a.kv_heads, a.head_dim, inverse, m.rope_theta);
}

}  // namespace

template <typename S>
void attention_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c) {
  const ops::AttentionShape a = shape_of(m, s, c.dims);
  const int64_t n = c.dims.rows(), h = m.hidden, q = a.hidden();
  const LinearSlot& qkv = s.linears[0];
  const LinearSlot& out = s.linears[1];
  norm_forward(m, s, params, x, c);
  resize(c.qkv, n * a.qkv_cols());
  ops::linear_forward(c.a.data(), params + qkv.w, at(params, qkv.b), c.qkv.data(), n, qkv.in, qkv.out);
  rope_qk(m, s, c.dims, c.qkv.data(), false);
  resize(c.probs, a.batch * a.heads * a.seq * a.seq);
  resize(c.mid, n * q);
  ops::attention_forward(c.qkv.data(), c.probs.data(), c.mid.data(), a);
  // row-parallel: the bias and the residual once, on tp rank 0 (the sum over ranks has them once)
  ops::linear_forward(c.mid.data(), params + out.w, s.adds_residual ? at(params, out.b) : nullptr, y, n, out.in, out.out);
  if (s.adds_residual) ops::MatMap<S>(y, n, h) += ops::ConstMatMap<S>(x, n, h);
}

template <typename S>
void attention_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                              UnitCache<S>& c) {
  const ops::AttentionShape a = shape_of(m, s, c.dims);
  const int64_t n = c.dims.rows(), h = m.hidden;
  const LinearSlot& qkv = s.linears[0];
  const LinearSlot& out = s.linears[1];
  c.d_out.assign(dy, dy + n * h);
  std::vector<S> d_mid(static_cast<std::size_t>(n * a.hidden()));
  ops::linear_backward_input(dy, params + out.w, d_mid.data(), n, out.in, out.out, false);
  resize(c.d_pre, n * a.qkv_cols());
  ops::attention_backward(c.qkv.data(), c.probs.data(), d_mid.data(), c.d_pre.data(), a);
  rope_qk(m, s, c.dims, c.d_pre.data(), true);
  resize(c.d_a, n * h);
  ops::linear_backward_input(c.d_pre.data(), params + qkv.w, c.d_a.data(), n, qkv.in, qkv.out, false);
  if (s.tp > 1) {  // this rank's part of d_a: summed over tp, then finish_input_grad
    std::copy(c.d_a.begin(), c.d_a.end(), dx);
    return;
  }
  norm_backward_input(m, s, params, dy, dx, c);
}

template <typename S>
void attention_backward_weight(const spec::Model&, const UnitSlots& s, S* grads, UnitCache<S>& c) {
  const int64_t n = c.dims.rows();
  linear_backward_weight(s.linears[1], c.mid.data(), c.d_out.data(), grads, n);
  linear_backward_weight(s.linears[0], c.a.data(), c.d_pre.data(), grads, n);
}

#define STAGECRAFT_INSTANTIATE(S)                                                                          \
  template void attention_forward<S>(const spec::Model&, const UnitSlots&, const S*, const S*, S*, UnitCache<S>&); \
  template void attention_backward_input<S>(const spec::Model&, const UnitSlots&, const S*, const S*, S*,      \
                                            UnitCache<S>&);                                                    \
  template void attention_backward_weight<S>(const spec::Model&, const UnitSlots&, S*, UnitCache<S>&);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::executor::detail
