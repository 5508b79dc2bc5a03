// Head unit: a = normf(x); logits [N, V] = a . W with W = wte^T (tied) or lm_head.w [C x V];
// loss = mean over the N rows of the softmax cross-entropy against the targets.
// Tensor parallelism (Megatron-LM's VocabParallelCrossEntropy): rank r has the logits z of its
// vocabulary slice [v0, v0 + v); per row it gives max m, sum s = sum exp(z - m) and the target's
// logit t (0 off its slice); over the ranks M = max m, S = sum s * exp(m - M), T = sum t; then
// loss = mean(M + log S - T) and dlogits = (exp(z - (M + log S)) - onehot) * dloss / N. The norm's
// weight gradient is Layer's.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "executor/model/units.hpp"

namespace stagecraft::executor::detail {

template <typename S>
void head_backward_input_partial(const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* d_a_part,
                                 UnitCache<S>& c);

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
  if (s.tp > 1) {
    head_backward_input_partial(m, s, params, dloss, dx, c);
    return;
  }
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

namespace {

// This rank's LM head columns [h x v] (the valid ones of its [h x vocab_rows] shard), or its table rows [v x h].
template <typename S>
auto lm_head_cols(const UnitSlots& s, const S* base, int64_t h) {
  return ops::ConstMatMap<S>(base + s.lm_head, h, s.vocab_rows).leftCols(s.vocab);
}
template <typename S>
auto table_rows(const UnitSlots& s, const S* base, int64_t h) {
  return ops::ConstMatMap<S>(base + s.wte, s.vocab_rows, h).topRows(s.vocab);
}

}  // namespace

template <typename S>
void head_forward_partial(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = s.vocab;
  norm_forward(m, s, params, x, c);
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

template <typename S>
S head_finish_loss(const S* reduced, int64_t n, UnitCache<S>& c) {
  resize(c.lse, n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    c.lse[static_cast<std::size_t>(i)] = reduced[i] + std::log(reduced[n + i]);
    total += static_cast<double>(c.lse[static_cast<std::size_t>(i)] - reduced[2 * n + i]);
  }
  return static_cast<S>(total / static_cast<double>(n));
}

template <typename S>
void head_backward_input_partial(const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* d_a_part,
                                 UnitCache<S>& c) {
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
  std::copy(c.d_a.begin(), c.d_a.end(), d_a_part);
}

// d lm_head [C, V] += a^T . dlogits;  tied: d wte [V, C] += dlogits^T . a (this rank's slice).
template <typename S>
void head_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, v = s.tp > 1 ? s.vocab : m.vocab;
  ops::ConstMatMap<S> a(c.a.data(), n, h);
  ops::ConstMatMap<S> d_logits(c.d_out.data(), n, v);
  if (s.tp > 1) {
    const GemmTimer timer(GemmForm::kTN, s.lm_head >= 0 ? h : v, n, s.lm_head >= 0 ? v : h, true);
    if (s.lm_head >= 0) {
      ops::MatMap<S>(grads + s.lm_head, h, s.vocab_rows).leftCols(v).noalias() += a.transpose() * d_logits;
    } else {
      ops::MatMap<S>(grads + s.wte, s.vocab_rows, h).topRows(v).noalias() += d_logits.transpose() * a;
    }
    return;
  }
  {
    const GemmTimer timer(GemmForm::kTN, s.lm_head >= 0 ? h : v, n, s.lm_head >= 0 ? v : h, true);
    if (s.lm_head >= 0) {
      ops::MatMap<S>(grads + s.lm_head, h, v).noalias() += a.transpose() * d_logits;
    } else {
      ops::MatMap<S>(grads + s.wte, v, h).noalias() += d_logits.transpose() * a;
    }
  }
}

#define STAGECRAFT_INSTANTIATE(S)                                                                  \
  template S head_forward<S>(const spec::Model&, const UnitSlots&, const S*, const S*, UnitCache<S>&); \
  template void head_backward_input<S>(const spec::Model&, const UnitSlots&, const S*, S, S*, UnitCache<S>&); \
  template void head_backward_weight<S>(const spec::Model&, const UnitSlots&, S*, UnitCache<S>&);          \
  template void head_forward_partial<S>(const spec::Model&, const UnitSlots&, const S*, const S*, S*, UnitCache<S>&); \
  template S head_finish_loss<S>(const S*, int64_t, UnitCache<S>&);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::executor::detail
