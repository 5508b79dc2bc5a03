// MLP sublayer unit: y = x + mlp(norm2(x)), F this tp rank's share of ffn_hidden (layers.hpp says
// what tp > 1 leaves partial). The norm's weight gradient is Layer's.
//   gelu / relu:    pre [N, F] = a . Wup + b;  mid = act(pre);                            y = x + mid . Wdown + b
//   swiglu / geglu: pre = a . Wgate + b, pre2 = a . Wup + b;  mid = act(pre) * pre2 (act silu / gelu)
#include "executor/model/units.hpp"

namespace stagecraft::executor::detail {

template <typename S>
void mlp_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, f = s.ffn;
  const LinearSlot& first = s.linears[0];  // gelu, relu: up; swiglu, geglu: gate
  const LinearSlot& down = s.linears.back();
  norm_forward(m, s, params, x, c);
  resize(c.pre, n * f);
  resize(c.mid, n * f);
  ops::linear_forward(c.a.data(), params + first.w, at(params, first.b), c.pre.data(), n, h, f);
  if (spec::gated(m.mlp)) {
    const LinearSlot& up = s.linears[1];
    resize(c.pre2, n * f);
    ops::linear_forward(c.a.data(), params + up.w, at(params, up.b), c.pre2.data(), n, h, f);
    if (m.mlp == spec::Mlp::kSwiglu) {
      ops::swiglu_forward(c.pre.data(), c.pre2.data(), c.mid.data(), n * f);
    } else {
      ops::geglu_forward(c.pre.data(), c.pre2.data(), c.mid.data(), n * f, m.gelu_exact);
    }
  } else if (m.mlp == spec::Mlp::kRelu) {
    ops::relu_forward(c.pre.data(), c.mid.data(), n * f);
  } else {
    ops::gelu_forward(c.pre.data(), c.mid.data(), n * f, m.gelu_exact);
  }
  // row-parallel: the bias and the residual once, on tp rank 0
  ops::linear_forward(c.mid.data(), params + down.w, s.adds_residual ? at(params, down.b) : nullptr, y, n, f, h);
  if (s.adds_residual) ops::MatMap<S>(y, n, h) += ops::ConstMatMap<S>(x, n, h);
}

template <typename S>
void mlp_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                        UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, f = s.ffn;
  const LinearSlot& first = s.linears[0];
  const LinearSlot& down = s.linears.back();
  c.d_out.assign(dy, dy + n * h);
  std::vector<S> d_mid(static_cast<std::size_t>(n * f));
  ops::linear_backward_input(dy, params + down.w, d_mid.data(), n, f, h, false);
  resize(c.d_pre, n * f);
  resize(c.d_a, n * h);
  if (spec::gated(m.mlp)) {
    const LinearSlot& up = s.linears[1];
    resize(c.d_pre2, n * f);
    if (m.mlp == spec::Mlp::kSwiglu) {
      ops::swiglu_backward(c.pre.data(), c.pre2.data(), d_mid.data(), c.d_pre.data(), c.d_pre2.data(), n * f);
    } else {
      ops::geglu_backward(c.pre.data(), c.pre2.data(), d_mid.data(), c.d_pre.data(), c.d_pre2.data(), n * f, m.gelu_exact);
    }
    ops::linear_backward_input(c.d_pre.data(), params + first.w, c.d_a.data(), n, h, f, false);
    ops::linear_backward_input(c.d_pre2.data(), params + up.w, c.d_a.data(), n, h, f, true);
  } else {
    if (m.mlp == spec::Mlp::kRelu) {
      ops::relu_backward(c.pre.data(), d_mid.data(), c.d_pre.data(), n * f);
    } else {
      ops::gelu_backward(c.pre.data(), d_mid.data(), c.d_pre.data(), n * f, m.gelu_exact);
    }
    ops::linear_backward_input(c.d_pre.data(), params + first.w, c.d_a.data(), n, h, f, false);
  }
  if (s.tp > 1) {  // this rank's part of d_a: summed over tp, then finish_input_grad
    std::copy(c.d_a.begin(), c.d_a.end(), dx);
    return;
  }
  norm_backward_input(m, s, params, dy, dx, c);
}

template <typename S>
void mlp_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c) {
  const int64_t n = c.dims.rows();
  linear_backward_weight(s.linears.back(), c.mid.data(), c.d_out.data(), grads, n);
  linear_backward_weight(s.linears[0], c.a.data(), c.d_pre.data(), grads, n);
  if (spec::gated(m.mlp)) linear_backward_weight(s.linears[1], c.a.data(), c.d_pre2.data(), grads, n);
}

#define STAGECRAFT_INSTANTIATE(S)                                                                    \
  template void mlp_forward<S>(const spec::Model&, const UnitSlots&, const S*, const S*, S*, UnitCache<S>&); \
  template void mlp_backward_input<S>(const spec::Model&, const UnitSlots&, const S*, const S*, S*,      \
                                      UnitCache<S>&);                                                  \
  template void mlp_backward_weight<S>(const spec::Model&, const UnitSlots&, S*, UnitCache<S>&);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::executor::detail
