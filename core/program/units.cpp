#include "core/program/units.hpp"

#include <numeric>

namespace stagecraft::program {

using spec::Mlp;
using spec::Model;

namespace {

// Appends a parameter tensor of `elems` owned by the unit's module `module`.
void add(Unit& u, int64_t elems, int module) {
  u.tensors.push_back(elems);
  u.module.push_back(static_cast<int8_t>(module));
}

int next_module(const Unit& u) { return u.module.empty() ? 0 : u.module.back() + 1; }

void norm_tensors(const Model& m, Unit& u) {
  const int mod = next_module(u);
  add(u, m.hidden, mod);
  if (m.norm == spec::Norm::kLayerNorm && m.bias) add(u, m.hidden, mod);
}

// A Linear of in x out on this rank, with its bias of `bias` elements when the model has biases.
void linear(const Model& m, Unit& u, int64_t weight, int64_t bias) {
  const int mod = next_module(u);
  add(u, weight, mod);
  if (m.bias) add(u, bias, mod);
}

// Rows of a vocab-parallel table on one rank (Megatron pads V to a multiple of t).
int64_t vocab_per_rank(const Model& m, int64_t tp) { return (m.vocab + tp - 1) / tp; }

Unit finish(Unit u) {
  u.params = std::accumulate(u.tensors.begin(), u.tensors.end(), int64_t{0});
  return u;
}

Unit attention(const Model& m, int64_t tp, int32_t block) {
  const int64_t h = m.hidden, d = m.head_dim();
  const int64_t kv_per_rank = m.kv_heads >= tp ? m.kv_heads / tp : 1;
  const int64_t qkv_out = h / tp + 2 * kv_per_rank * d;
  Unit u{UnitKind::kAttention, block, {}, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, u);
  linear(m, u, h * qkv_out, qkv_out);
  linear(m, u, (h / tp) * h, h);
  const double gemm = 2.0 * static_cast<double>(h * qkv_out + (h / tp) * h);
  const double scores = 4.0 * static_cast<double>(m.seq_len) * static_cast<double>(h / tp);
  u.fwd_flops_per_token = gemm + scores;
  u.bwd_input_flops_per_token = gemm + 2 * scores;
  u.bwd_weight_flops_per_token = gemm;
  u.score_flops_per_token = scores;
  return finish(u);
}

Unit mlp(const Model& m, int64_t tp, int32_t block) {
  const int64_t h = m.hidden, f = m.ffn_hidden / tp;
  const int64_t in_matrices = m.mlp == Mlp::kSwiglu ? 2 : 1;
  Unit u{UnitKind::kMlp, block, {}, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, u);
  for (int64_t i = 0; i < in_matrices; ++i) linear(m, u, h * f, f);
  linear(m, u, f * h, h);
  const double gemm = 2.0 * static_cast<double>((in_matrices + 1) * h * f);
  u.fwd_flops_per_token = gemm;
  u.bwd_input_flops_per_token = gemm;
  u.bwd_weight_flops_per_token = gemm;
  return finish(u);
}

}  // namespace

int64_t tied_head_copy(const Model& m, int64_t tp) { return m.tied_embeddings ? vocab_per_rank(m, tp) * m.hidden : 0; }

std::vector<Unit> model_units(const Model& m, int64_t tp) {
  std::vector<Unit> units;
  units.reserve(static_cast<std::size_t>(unit_count(m)));
  Unit emb{UnitKind::kEmbedding, -1, {}, {}, 0, 0, 0, 0, 0};
  add(emb, vocab_per_rank(m, tp) * m.hidden, 0);
  if (m.position == spec::Position::kLearned) add(emb, m.position_rows() * m.hidden, 1);
  units.push_back(finish(emb));
  for (int32_t b = 0; b < static_cast<int32_t>(m.layers); ++b) {
    units.push_back(attention(m, tp, b));
    units.push_back(mlp(m, tp, b));
  }
  Unit head{UnitKind::kHead, -1, {}, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, head);
  if (!m.tied_embeddings) add(head, vocab_per_rank(m, tp) * m.hidden, next_module(head));
  const double gemm = 2.0 * static_cast<double>(m.hidden) * static_cast<double>(vocab_per_rank(m, tp));
  head.fwd_flops_per_token = gemm;
  head.bwd_input_flops_per_token = gemm;
  head.bwd_weight_flops_per_token = gemm;
  units.push_back(finish(head));
  return units;
}

}  // namespace stagecraft::program
