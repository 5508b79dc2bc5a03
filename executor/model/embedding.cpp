// Embedding unit: x [N, C] = wte[token] + wpe[position + position_offset] (learned positions only;
// OPT's table starts its positions 2 rows in). Tensor parallelism (Megatron's
// VocabParallelEmbedding): rank r looks up only the tokens of its vocabulary slice (0 for the
// others) and adds wpe on rank 0, so the sum over the ranks is the embedding; wpe's gradient is
// the full one on every rank.
#include "executor/model/units.hpp"

namespace stagecraft::executor::detail {

template <typename S>
void embedding_forward(const spec::Model& m, const UnitSlots& s, const S* params, S* y, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, T = c.dims.seq;
  for (int64_t r = 0; r < n; ++r) {
    ops::RowMap<S> yr(y + r * h, h);
    const int64_t row = c.tokens[static_cast<std::size_t>(r)] - s.vocab0;
    if (row >= 0 && row < s.vocab) {
      yr = ops::ConstRowMap<S>(params + s.wte + row * h, h);
    } else {
      yr.setZero();
    }
    if (s.wpe >= 0 && s.adds_residual) yr += ops::ConstRowMap<S>(params + s.wpe + (r % T + m.position_offset) * h, h);
  }
}

// No input gradient (the input is token ids); keeps dy for the table gradients.
template <typename S>
void embedding_backward_input(const spec::Model& m, const S* dy, UnitCache<S>& c) {
  c.d_out.assign(dy, dy + c.dims.rows() * m.hidden);
}

// dwte[token] += dy row; dwpe[position] += dy row.
template <typename S>
void embedding_backward_weight(const spec::Model& m, const UnitSlots& s, S* grads, UnitCache<S>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, T = c.dims.seq;
  for (int64_t r = 0; r < n; ++r) {
    ops::ConstRowMap<S> dr(c.d_out.data() + r * h, h);
    const int64_t row = c.tokens[static_cast<std::size_t>(r)] - s.vocab0;
    if (row >= 0 && row < s.vocab) ops::RowMap<S>(grads + s.wte + row * h, h) += dr;
    if (s.wpe >= 0) ops::RowMap<S>(grads + s.wpe + (r % T + m.position_offset) * h, h) += dr;
  }
}

#define STAGECRAFT_INSTANTIATE(S)                                                                 \
  template void embedding_forward<S>(const spec::Model&, const UnitSlots&, const S*, S*, UnitCache<S>&); \
  template void embedding_backward_input<S>(const spec::Model&, const S*, UnitCache<S>&);           \
  template void embedding_backward_weight<S>(const spec::Model&, const UnitSlots&, S*, UnitCache<S>&);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::executor::detail
