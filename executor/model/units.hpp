// The math of each unit kind behind Layer (layers.hpp): one .cpp per kind (embedding, attention,
// mlp, head), each instantiated for float and double. Internal to executor/model: callers use
// Layer, which checks buffer sizes and token ids before these run.
//
// Shape legend: N = B*T rows, C hidden, V vocab; dims and token ids come from the cache.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/ops.hpp"

namespace stagecraft::executor::detail {

template <typename S>
const S* at(const S* base, int64_t offset) {
  return offset < 0 ? nullptr : base + offset;
}
template <typename S>
S* at(S* base, int64_t offset) {
  return offset < 0 ? nullptr : base + offset;
}

template <typename S>
void resize(std::vector<S>& v, int64_t n) {
  v.resize(static_cast<std::size_t>(n));
}

// a = norm(x); keeps xhat and rstd for backward.
template <typename S>
void norm_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden;
  resize(c.xhat, n * h);
  resize(c.rstd, n);
  resize(c.a, n * h);
  ops::norm_forward(m.norm == spec::Norm::kLayerNorm, m.norm_eps, x, params + s.norm_w, at(params, s.norm_b), c.a.data(),
                    c.xhat.data(), c.rstd.data(), n, h);
}

// dx = residual + d(norm input) from c.d_a; `residual` is dy for a sublayer, null for the head.
// c.d_a covers rows [c.norm_row0, + its rows) (all rows but under sequence parallelism), and so
// do dx and the residual's rows read.
template <typename S>
void norm_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, const S* residual, S* dx,
                         const UnitCache<S>& c) {
  const int64_t h = m.hidden, n = static_cast<int64_t>(c.d_a.size()) / h, r0 = c.norm_row0;
  if (residual != nullptr) std::copy(residual + r0 * h, residual + (r0 + n) * h, dx);
  ops::norm_backward_input(m.norm == spec::Norm::kLayerNorm, c.d_a.data(), params + s.norm_w, c.xhat.data() + r0 * h,
                           c.rstd.data() + r0, dx, n, h, residual != nullptr);
}

template <typename S>
void norm_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, const UnitCache<S>& c) {
  const int64_t h = m.hidden, n = static_cast<int64_t>(c.d_a.size()) / h;
  ops::norm_backward_weight(c.d_a.data(), c.xhat.data() + c.norm_row0 * h, grads + s.norm_w, at(grads, s.norm_b), n, h);
}

template <typename S>
void linear_backward_weight(const LinearSlot& l, const S* x, const S* dy, S* grads, int64_t n) {
  ops::linear_backward_weight(x, dy, grads + l.w, at(grads, l.b), n, l.in, l.out);
}

// ---- per kind (defined in embedding.cpp, attention.cpp, mlp.cpp, head.cpp) ----------------------

template <typename S>
void embedding_forward(const spec::Model& m, const UnitSlots& s, const S* params, S* y, UnitCache<S>& c);
template <typename S>
void embedding_backward_input(const spec::Model& m, const S* dy, UnitCache<S>& c);
template <typename S>
void embedding_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c);

template <typename S>
void attention_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c);
template <typename S>
void attention_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                              UnitCache<S>& c);
template <typename S>
void attention_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c);

template <typename S>
void mlp_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c);
template <typename S>
void mlp_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                        UnitCache<S>& c);
template <typename S>
void mlp_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c);

template <typename S>
S head_forward(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCache<S>& c);
template <typename S>
void head_backward_input(const spec::Model& m, const UnitSlots& s, const S* params, S dloss, S* dx, UnitCache<S>& c);
template <typename S>
void head_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c);
// tp > 1 (head.cpp): the local statistics [max | sum exp | target logit] (3N), and the loss from their reduction.
template <typename S>
void head_forward_partial(const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCache<S>& c);
template <typename S>
S head_finish_loss(const S* reduced, int64_t n, UnitCache<S>& c);

}  // namespace stagecraft::executor::detail
