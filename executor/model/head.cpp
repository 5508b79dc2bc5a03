// Head unit: a = normf(x); logits [N, V] = a . W with W = wte^T (tied) or lm_head.w [C x V];
// loss = mean over the N rows of the softmax cross-entropy against the targets.
#include "executor/model/units.hpp"

namespace stagecraft::executor::detail {

template <typename S>
S head_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = m.vocab;
  norm_forward(m, s, params, x, c);
  resize(c.probs, n * v);
  ops::MatMap<S> logits(c.probs.data(), n, v);
  const GemmTimer timer(s.lm_head >= 0 ? GemmForm::kNN : GemmForm::kNT, n, h, v, false);
  if (s.lm_head >= 0) {
    logits.noalias() = ops::ConstMatMap<S>(c.a.data(), n, h) * ops::ConstMatMap<S>(params + s.lm_head, h, v);
  } else {
    logits.noalias() = ops::ConstMatMap<S>(c.a.data(), n, h) * ops::ConstMatMap<S>(params + s.wte, v, h).transpose();
  }
  return ops::softmax_cross_entropy(c.probs.data(), c.tokens.data(), n, v);
}

// dlogits = (probs - onehot) * dloss / N;  d_a = dlogits . W^T;  dx = normf backward.
template <typename S>
void head_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* dx, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = m.vocab;
  resize(c.d_out, n * v);
  ops::softmax_cross_entropy_backward(c.probs.data(), c.tokens.data(), dloss / static_cast<S>(n), c.d_out.data(), n, v);
  resize(c.d_a, n * h);
  ops::MatMap<S> d_a(c.d_a.data(), n, h);
  ops::ConstMatMap<S> d_logits(c.d_out.data(), n, v);
  {
    const GemmTimer timer(s.lm_head >= 0 ? GemmForm::kNT : GemmForm::kNN, n, v, h, false);
    if (s.lm_head >= 0) {
      d_a.noalias() = d_logits * ops::ConstMatMap<S>(params + s.lm_head, h, v).transpose();
    } else {
      d_a.noalias() = d_logits * ops::ConstMatMap<S>(params + s.wte, v, h);
    }
  }
  norm_backward_input(m, s, params, static_cast<const S*>(nullptr), dx, c);
}

// d lm_head [C, V] += a^T . dlogits;  tied: d wte [V, C] += dlogits^T . a.
template <typename S>
void head_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = m.vocab;
  ops::ConstMatMap<S> a(c.a.data(), n, h);
  ops::ConstMatMap<S> d_logits(c.d_out.data(), n, v);
  {
    const GemmTimer timer(GemmForm::kTN, s.lm_head >= 0 ? h : v, n, s.lm_head >= 0 ? v : h, true);
    if (s.lm_head >= 0) {
      ops::MatMap<S>(grads + s.lm_head, h, v).noalias() += a.transpose() * d_logits;
    } else {
      ops::MatMap<S>(grads + s.wte, v, h).noalias() += d_logits.transpose() * a;
    }
  }
  norm_backward_weight(m, s, grads, c);
}

#define STAGECRAFT_INSTANTIATE(S)                                                                  \
  template S head_forward<S>(const spec::Model&, const UnitSlots&, const S*, const S*, UnitCache<S>&); \
  template void head_backward_input<S>(const spec::Model&, const UnitSlots&, const S*, S, S*, UnitCache<S>&); \
  template void head_backward_weight<S>(const spec::Model&, const UnitSlots&, S*, UnitCache<S>&);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::executor::detail
